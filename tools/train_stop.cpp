#include "tools/train_stop.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

#include "gpu/comm.h"
#include "gpu/device.h"
#include "gpu/stream.h"

namespace strata::tools {
namespace {

std::atomic<int> stop_signal{0};

extern "C" void on_stop_signal(int signal) {
  if (stop_signal.exchange(signal) != 0) _exit(128 + signal);  // the second one: no waiting
}

}  // namespace

StopSignals::StopSignals() {
  stop_signal.store(0);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

StopSignals::~StopSignals() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

int StopSignals::requested(gpu::Comm& comm, gpu::Device& device) const {
  auto seen = static_cast<float>(stop_signal.load());
  if (comm.world_size() == 1) return static_cast<int>(seen);
  gpu::DeviceBuffer flag = device.allocate(sizeof(float), "stop signal");
  gpu::Stream& stream = device.compute_stream();
  stream.copy(flag.data(), &seen, sizeof(float), gpu::CopyKind::host_to_device);
  comm.all_reduce(stream, flag.data(), 1, gpu::DataType::float32, gpu::ReduceOp::max);
  stream.copy(&seen, flag.data(), sizeof(float), gpu::CopyKind::device_to_host);
  stream.synchronize();
  return static_cast<int>(seen);
}

int StopSignals::exit_status(int signal) {
  return 128 + signal;
}

const char* StopSignals::name(int signal) {
  return signal == SIGTERM ? "SIGTERM" : "SIGINT";
}

}  // namespace strata::tools
