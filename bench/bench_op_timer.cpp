#include "bench/bench_op_timer.h"

#include <random>

namespace strata::tools {
namespace {

constexpr std::int64_t kRandomBlockElements = std::int64_t{1} << 20;

}  // namespace

DeviceOpTimer::DeviceOpTimer(gpu::Device& device, gpu::Ops& ops, int repeats)
    : device_(device), ops_(ops) {
  STRATA_ASSERT(repeats > 0);
  std::mt19937 generator(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> block(static_cast<std::size_t>(kRandomBlockElements));
  for (float& value : block)
    value = uniform(generator);
  random_block_ = device_.allocate(kRandomBlockElements * 4, "bench random values");
  gpu::Stream& stream = device_.compute_stream();
  stream.copy(random_block_.data(), block.data(), random_block_.bytes(),
              gpu::CopyKind::host_to_device);
  stream.synchronize();  // before `block` goes
  for (int r = 0; r < repeats; ++r) {
    starts_.push_back(device_.create_event());
    ends_.push_back(device_.create_event());
  }
}

void DeviceOpTimer::fill_random(gpu::Tensor target, std::int64_t elements) {
  STRATA_ASSERT(gpu::is_compute_type(target.type));
  gpu::Stream& stream = device_.compute_stream();
  const std::int64_t block_elements = random_block_.bytes() / 4;
  for (std::int64_t done = 0; done < elements; done += block_elements) {
    const std::int64_t count = std::min(block_elements, elements - done);
    const gpu::Tensor part = target.at(done);
    if (target.type == gpu::DataType::float32) {
      stream.copy(part.data, random_block_.data(), count * 4, gpu::CopyKind::device_to_device);
    } else {
      ops_.cast_from_float(stream, part.data, target.type, random_block_.as<float>(), count);
    }
  }
}

}  // namespace strata::tools
