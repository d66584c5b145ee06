// The gather policy on its own: what it keeps after a release (persistence, reuse distance along
// the trace), what it evicts under max_live_parameters and in which order, what the reclaimer
// drops first, what it prefetches, and how a departure from the trace is handled. The parameter
// coordinator asks it these questions, in the engine and in the memory estimate's counted step.
#include "engine/zero/gather_policy.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <vector>

namespace strata::engine::zero {
namespace {

constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max();

// Padded to 1024-element shards on one rank: m0 1024 (100 used), m1 2048, m2 1024, m3 3072.
std::vector<std::vector<ParamSpec>> modules() {
  return {{{"m0", {100}}}, {{"m1", {2048}}}, {{"m2", {1024}}}, {{"m3", {3072}}}};
}

// A forward pass and a backward pass, as the engine acquires the modules.
const std::vector<int> kForwardBackward = {0, 1, 2, 3, 3, 2, 1, 0};

GatherRules stage3(std::int64_t max_reuse_distance) {
  GatherRules rules;
  rules.release_after_use = true;
  rules.persistence_threshold = 0;
  rules.max_reuse_distance = max_reuse_distance;
  rules.prefetch_bucket_size = 0;
  rules.max_live_parameters = kUnbounded;
  return rules;
}

// Does what ParamCoordinator does with the policy's answers, recording gathers and drops instead
// of moving memory.
struct Driver {
  explicit Driver(GatherRules rules) : layout(modules(), 1, 1024), policy(layout, rules) {}

  // Returns false when the acquisition departed from the trace.
  bool acquire(int m) {
    const bool in_order = policy.note_acquire(m);
    if (!policy.is_gathered(m)) {
      const std::int64_t padded = layout.module(m).padded_numel;
      for (int evict = policy.next_to_evict(padded); evict >= 0;
           evict = policy.next_to_evict(padded))
        drop(evict);
      policy.mark_gathered(m);
      gathers.push_back(m);
    }
    policy.add_user(m);
    return in_order;
  }
  void release(int m) {
    if (policy.release(m)) drop(m);
  }
  void drop(int m) {
    policy.mark_dropped(m);
    drops.push_back(m);
  }
  // One training step over `order`, each module released after its use, then the optimizer's
  // invalidation; returns whether the step recorded the trace.
  bool step(const std::vector<int>& order) {
    policy.begin_pass(true);
    for (int m : order) {
      acquire(m);
      release(m);
    }
    const bool recorded = policy.end_step();
    for (int m = 0; m < layout.module_count(); ++m)
      if (policy.is_gathered(m)) drop(m);
    return recorded;
  }
  void clear() {
    gathers.clear();
    drops.clear();
  }

  FlatLayout layout;
  GatherPolicy policy;
  std::vector<int> gathers;
  std::vector<int> drops;
};

TEST(GatherPolicy, PersistentModulesStayGatheredAfterUse) {
  GatherRules rules = stage3(0);
  rules.persistence_threshold = 1000;  // m0 (100 elements) is persistent, m2 (1024) is not
  Driver d(rules);
  d.policy.begin_pass(true);
  for (int m : kForwardBackward) {
    d.acquire(m);
    d.release(m);
    EXPECT_EQ(d.policy.is_gathered(m), m == 0) << "module " << m;
  }
  EXPECT_TRUE(d.policy.persistent(0));
  EXPECT_FALSE(d.policy.persistent(2));
  EXPECT_EQ(d.gathers, (std::vector<int>{0, 1, 2, 3, 3, 2, 1}));  // m0 gathered once
  EXPECT_EQ(d.policy.live_elements(), 1024);
}

TEST(GatherPolicy, StagesZeroToTwoKeepEveryModuleGathered) {
  GatherRules rules = stage3(0);
  rules.release_after_use = false;
  Driver d(rules);
  d.policy.begin_pass(true);
  for (int m : kForwardBackward) {
    d.acquire(m);
    d.release(m);
  }
  EXPECT_TRUE(d.drops.empty());
  EXPECT_EQ(d.gathers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(d.policy.live_elements(), 1024 + 2048 + 1024 + 3072);
}

TEST(GatherPolicy, AModuleIsReleasedOnlyByItsLastUser) {
  Driver d(stage3(0));
  d.policy.begin_pass(true);
  d.acquire(1);
  d.acquire(1);  // a module borrowed by the one that owns it: two users
  d.release(1);
  EXPECT_TRUE(d.policy.is_gathered(1));
  EXPECT_EQ(d.policy.users(1), 1);
  d.release(1);
  EXPECT_FALSE(d.policy.is_gathered(1));
}

TEST(GatherPolicy, OnAFollowedTraceModulesUsedAgainWithinTheReuseDistanceAreKept) {
  Driver d(stage3(8192));
  // Recording, the policy does not know what comes next: every module is released after use.
  EXPECT_TRUE(d.step(kForwardBackward));
  EXPECT_EQ(d.gathers, kForwardBackward);
  d.clear();

  d.policy.begin_pass(true);
  d.acquire(0);
  // After m0: m1 m2 m3 m3 m2 m1 before its next use, 2048 + 1024 + 3072 + 3072 + 1024 + 2048.
  EXPECT_EQ(d.policy.reuse_distance(0), 12'288);
  d.release(0);
  EXPECT_FALSE(d.policy.is_gathered(0));
  d.acquire(1);
  EXPECT_EQ(d.policy.reuse_distance(1), 8192);  // not below the distance: released
  d.release(1);
  EXPECT_FALSE(d.policy.is_gathered(1));
  d.acquire(2);
  EXPECT_EQ(d.policy.reuse_distance(2), 6144);
  d.release(2);
  EXPECT_TRUE(d.policy.is_gathered(2));
  d.acquire(3);
  EXPECT_EQ(d.policy.reuse_distance(3), 0);
  d.release(3);
  EXPECT_TRUE(d.policy.is_gathered(3));
  for (int m : {3, 2, 1, 0}) {
    d.acquire(m);
    EXPECT_EQ(d.policy.reuse_distance(m), -1);  // not used again this step
    d.release(m);
  }
  EXPECT_FALSE(d.policy.end_step());
  // m2 and m3 were kept between their two uses and gathered once each.
  EXPECT_EQ(d.gathers, (std::vector<int>{0, 1, 2, 3, 1, 0}));
  EXPECT_EQ(d.policy.live_elements(), 0);
}

TEST(GatherPolicy, MaxLiveParametersEvictsUnusedModulesInOrderPersistentOnesLast) {
  GatherRules rules = stage3(0);
  rules.release_after_use = false;
  rules.persistence_threshold = 1000;  // m0 is persistent
  rules.max_live_parameters = 4096;
  Driver d(rules);
  d.policy.begin_pass(true);
  for (int m : {0, 1, 2}) {
    d.acquire(m);
    d.release(m);
  }
  EXPECT_TRUE(d.drops.empty());  // 1024 + 2048 + 1024 fits
  // m3 (3072) needs all but 1024 elements gone: m1 and m2 in module order; the persistent m0,
  // first in module order, stays.
  d.acquire(3);
  EXPECT_EQ(d.drops, (std::vector<int>{1, 2}));
  EXPECT_EQ(d.policy.live_elements(), 1024 + 3072);
  // With no other left, the persistent module goes too; a module in use never does.
  EXPECT_EQ(d.policy.next_to_evict(2048), 0);
  d.drop(0);
  EXPECT_EQ(d.policy.next_to_evict(2048), -1);
  EXPECT_EQ(d.policy.next_to_evict(1024), -1);  // it fits
  d.release(3);
  EXPECT_EQ(d.policy.next_to_evict(2048), 3);
}

TEST(GatherPolicy, TheReclaimerDropsTheModuleNeededAgainLastFirstAndPersistentOnesLast) {
  GatherRules rules = stage3(kUnbounded);  // keep everything used again this step
  rules.persistence_threshold = 1000;      // m0 is persistent
  Driver d(rules);
  d.step(kForwardBackward);
  d.policy.begin_pass(true);
  for (int m : {0, 1, 2}) {
    d.acquire(m);
    d.release(m);
  }
  d.acquire(3);
  // Needed again: m2 after 3072 elements, m1 after 4096, m0 after 6144. m3 is in use.
  EXPECT_EQ(d.policy.next_to_reclaim(), 1);
  d.drop(1);
  EXPECT_EQ(d.policy.next_to_reclaim(), 2);
  d.drop(2);
  EXPECT_EQ(d.policy.next_to_reclaim(), 0);  // the persistent one, now that it is alone
  d.drop(0);
  EXPECT_EQ(d.policy.next_to_reclaim(), -1);
}

TEST(GatherPolicy, TheReclaimerDropsAModuleNotNeededAgainBeforeAnyOther) {
  GatherRules rules = stage3(0);
  rules.release_after_use = false;  // stages 0-2: everything stays gathered
  Driver d(rules);
  const std::vector<int> order = {0, 1, 2, 3, 3, 2, 1};  // m0 is not used in backward
  d.step(order);
  d.policy.begin_pass(true);
  for (int m : {0, 1, 2, 3}) {
    d.acquire(m);
    d.release(m);
  }
  // m3 is needed next (distance 0), m2 after 3072, m1 after 4096; m0 never again.
  EXPECT_EQ(d.policy.reuse_distance(0), -1);
  std::vector<int> reclaimed;
  for (int m = d.policy.next_to_reclaim(); m >= 0; m = d.policy.next_to_reclaim()) {
    reclaimed.push_back(m);
    d.drop(m);
  }
  EXPECT_EQ(reclaimed, (std::vector<int>{0, 1, 2, 3}));
}

// The modules prefetch_ahead asks for after `held` are acquired (and kept) on the step that
// follows the trace of kForwardBackward; m1 stays in CPU memory, every other module is on NVMe.
std::vector<int> prefetched_after(std::int64_t prefetch_bucket_size, const std::vector<int>& held,
                                  bool accept = true) {
  GatherRules rules = stage3(0);
  rules.prefetch_bucket_size = prefetch_bucket_size;
  Driver d(rules);
  auto reads_from_nvme = [](int m) { return m != 1; };
  std::vector<int> prefetched;
  auto prefetch = [&](int m) {
    prefetched.push_back(m);
    return accept;
  };
  d.policy.begin_pass(true);
  for (int m : kForwardBackward) {
    d.acquire(m);
    d.policy.prefetch_ahead(reads_from_nvme, prefetch);
    d.release(m);
  }
  EXPECT_TRUE(prefetched.empty()) << "a recording step knows nothing ahead";
  EXPECT_TRUE(d.policy.end_step());
  d.policy.begin_pass(true);
  for (int m : held)
    d.acquire(m);
  d.policy.prefetch_ahead(reads_from_nvme, prefetch);
  return prefetched;
}

TEST(GatherPolicy, PrefetchLooksAheadAlongTheTraceUpToTheBucket) {
  // After m0: m1 (not on NVMe), m2 (1024), m3 (3072: 4096 in all), m3 again (past the bucket).
  EXPECT_EQ(prefetched_after(4096, {0}), (std::vector<int>{2, 3}));
  // A refused prefetch (no free pool buffer) stops the scan.
  EXPECT_EQ(prefetched_after(4096, {0}, false), (std::vector<int>{2}));
  // Without a bound: every use ahead that needs a read, but not m0, which is gathered.
  EXPECT_EQ(prefetched_after(kUnbounded, {0}), (std::vector<int>{2, 3, 3, 2}));
}

// The modules gather_ahead gathers after acquiring m0 on the step that follows the trace of
// kForwardBackward, where `in_cpu` says which shards are in CPU memory; `room`: how many
// gathers find memory.
std::vector<int> gathered_ahead_after_m0(std::int64_t prefetch_bucket_size,
                                         const std::function<bool(int)>& in_cpu, int room = 8,
                                         std::int64_t max_live = kUnbounded) {
  GatherRules rules = stage3(0);
  rules.prefetch_bucket_size = prefetch_bucket_size;
  rules.max_live_parameters = max_live;
  Driver d(rules);
  EXPECT_TRUE(d.step(kForwardBackward));
  d.policy.begin_pass(true);
  d.acquire(0);
  std::vector<int> ahead;
  d.policy.gather_ahead(in_cpu, [&](int m) {
    if (static_cast<int>(ahead.size()) == room) return false;
    d.policy.mark_gathered(m);
    ahead.push_back(m);
    return true;
  });
  EXPECT_EQ(d.policy.users(0), 1);
  for (int m : ahead)
    EXPECT_EQ(d.policy.users(m), 0) << "gathered ahead, not yet acquired";
  return ahead;
}

TEST(GatherPolicy, GatherAheadTakesTheModulesInCpuMemoryWithinTheWindowOfNextUses) {
  const auto every = [](int) { return true; };
  // The window counts every use after m0: m1 (2048), m2 (1024), m3 (3072)...
  EXPECT_EQ(gathered_ahead_after_m0(2048, every), (std::vector<int>{1}));
  EXPECT_EQ(gathered_ahead_after_m0(3072, every), (std::vector<int>{1, 2}));
  // ... at least the next use whenever there is a bucket, however large that module is.
  EXPECT_EQ(gathered_ahead_after_m0(1, every), (std::vector<int>{1}));
  EXPECT_TRUE(gathered_ahead_after_m0(0, every).empty());
  // A module on NVMe (m1) takes its place in the window without being gathered: m2, needed
  // after it, is not taken with a window of m1's size.
  const auto not_m1 = [](int m) { return m != 1; };
  EXPECT_TRUE(gathered_ahead_after_m0(2048, not_m1).empty());
  EXPECT_EQ(gathered_ahead_after_m0(3072, not_m1), (std::vector<int>{2}));
  // Without a bound, every module not gathered, each once.
  EXPECT_EQ(gathered_ahead_after_m0(kUnbounded, every), (std::vector<int>{1, 2, 3}));
  // No memory for one: nothing more is taken.
  EXPECT_EQ(gathered_ahead_after_m0(kUnbounded, every, 1), (std::vector<int>{1}));
  // Under max_live_parameters, without dropping anything: m0 (1024) and m1 (2048) fit in 3072.
  EXPECT_EQ(gathered_ahead_after_m0(kUnbounded, every, 8, 3072), (std::vector<int>{1}));
}

TEST(GatherPolicy, ADepartureFromTheTraceStopsFollowingAndTheNextStepRecords) {
  GatherRules rules = stage3(kUnbounded);
  rules.prefetch_bucket_size = kUnbounded;
  Driver d(rules);
  EXPECT_TRUE(d.step(kForwardBackward));
  EXPECT_EQ(d.policy.trace_length(), kForwardBackward.size());

  d.policy.begin_pass(true);
  EXPECT_TRUE(d.acquire(0));
  d.release(0);
  EXPECT_TRUE(d.policy.is_gathered(0));  // followed: used again this step, kept
  EXPECT_FALSE(d.acquire(2));            // m1 was next: departs
  EXPECT_TRUE(d.acquire(1));             // reported once
  d.release(1);
  EXPECT_FALSE(d.policy.is_gathered(1)) << "with no trace to follow nothing is kept for reuse";
  int prefetches = 0;
  d.policy.prefetch_ahead([](int) { return true; }, [&](int) { return ++prefetches > 0; });
  EXPECT_EQ(prefetches, 0);
  d.release(2);
  EXPECT_FALSE(d.policy.end_step());

  // The next step records the new order, and the one after follows it.
  const std::vector<int> reordered = {0, 2, 1, 3, 3, 1, 2, 0};
  EXPECT_TRUE(d.step(reordered));
  d.policy.begin_pass(true);
  for (int m : reordered)
    EXPECT_TRUE(d.acquire(m)) << "module " << m;
  for (int m : reordered)
    d.release(m);
  EXPECT_FALSE(d.policy.end_step());
}

TEST(GatherPolicy, AnEvaluationPassNeitherFollowsNorChangesTheTrace) {
  Driver d(stage3(kUnbounded));
  d.step(kForwardBackward);
  d.policy.begin_pass(false);
  for (int m : {3, 0}) {
    EXPECT_TRUE(d.acquire(m));
    d.release(m);
    EXPECT_FALSE(d.policy.is_gathered(m)) << "evaluation keeps nothing for reuse";
  }
  EXPECT_EQ(d.policy.trace_length(), kForwardBackward.size());
  // Training goes on following the recorded trace.
  d.policy.begin_pass(true);
  for (int m : kForwardBackward)
    EXPECT_TRUE(d.acquire(m)) << "module " << m;
  for (int m : kForwardBackward)
    d.release(m);
  EXPECT_FALSE(d.policy.end_step());
}

}  // namespace
}  // namespace strata::engine::zero
