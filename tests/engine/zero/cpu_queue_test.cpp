// zero::CpuQueue: jobs run in submission order on the queue's own thread; a full queue blocks the
// submitter; a failed job's error reaches every wait for it and for the jobs it skipped, and
// drain() once, after which jobs run again.
#include "engine/zero/cpu_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace strata::engine::zero {
namespace {

TEST(CpuQueue, JobsRunInOrderOffTheSubmittingThread) {
  CpuQueue queue("order", 4);
  std::vector<int> ran;
  std::thread::id job_thread;
  // More jobs than the ring holds: submit() waits for room, the order is kept.
  for (int i = 0; i < 100; ++i) {
    queue.submit([&ran, &job_thread, i] {
      ran.push_back(i);
      job_thread = std::this_thread::get_id();
    });
  }
  queue.drain();
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(ran[static_cast<std::size_t>(i)], i);
  EXPECT_NE(job_thread, std::this_thread::get_id());
  EXPECT_EQ(queue.last(), 100);
}

// wait(t) returns once job t has run; the job behind it may still be blocked.
TEST(CpuQueue, WaitReturnsOnceItsJobHasRun) {
  CpuQueue queue("wait", 8);
  std::atomic<bool> release = false;
  std::atomic<int> done = 0;
  const CpuQueue::Ticket first = queue.submit([&done] { ++done; });
  queue.submit([&release, &done] {
    while (!release.load())
      std::this_thread::yield();
    ++done;
  });
  queue.wait(first);
  EXPECT_GE(done.load(), 1);
  release = true;
  queue.drain();
  EXPECT_EQ(done.load(), 2);
  queue.wait(0);  // names no job
}

TEST(CpuQueue, AFailureSkipsTheJobsBehindItUntilDrained) {
  CpuQueue queue("failure", 8);
  int ran = 0;
  const CpuQueue::Ticket before = queue.submit([&ran] { ++ran; });
  const CpuQueue::Ticket failed = queue.submit([] { throw std::runtime_error("disk full"); });
  const CpuQueue::Ticket skipped = queue.submit([&ran] { ++ran; });
  EXPECT_NO_THROW(queue.wait(before));
  EXPECT_THROW(queue.wait(failed), std::runtime_error);
  EXPECT_THROW(queue.wait(skipped), std::runtime_error);
  try {
    queue.drain();
    FAIL() << "drain() did not report the failure";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "disk full");
  }
  EXPECT_EQ(ran, 1);
  // The failed run stays failed for whoever waits on it later (the overlapped step's thread may
  // come after the drain); new jobs run.
  EXPECT_THROW(queue.wait(skipped), std::runtime_error);
  const CpuQueue::Ticket after = queue.submit([&ran] { ++ran; });
  EXPECT_NO_THROW(queue.wait(after));
  EXPECT_NO_THROW(queue.drain());
  EXPECT_EQ(ran, 2);
}

TEST(CpuQueue, DestroyingTheQueueRunsWhatIsQueued) {
  std::atomic<int> ran = 0;
  {
    CpuQueue queue("destroy", 16);
    for (int i = 0; i < 10; ++i)
      queue.submit([&ran] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace strata::engine::zero
