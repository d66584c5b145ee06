// The main of the comm tests: the World lives for the whole process (MPI is initialized once and
// finalized once), so it is started here rather than in a fixture. Under mpirun every rank runs
// every test in the same order; ranks other than 0 print only failures.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tests/gpu/comm/comm_test_util.h"

namespace strata::gpu::testing {
namespace {

World* world_instance = nullptr;

float widen(DataType type, const std::byte* element) {
  switch (type) {
    case DataType::float32: {
      float value = 0;
      std::memcpy(&value, element, 4);
      return value;
    }
    case DataType::bfloat16: {
      std::uint16_t bits = 0;
      std::memcpy(&bits, element, 2);
      return host::kernels::bf16_to_float(bits);
    }
    default: {
      std::uint16_t bits = 0;
      std::memcpy(&bits, element, 2);
      return host::kernels::fp16_to_float(bits);
    }
  }
}

void narrow(DataType type, float value, std::byte* target) {
  if (type == DataType::float32) {
    std::memcpy(target, &value, 4);
    return;
  }
  const std::uint16_t bits = type == DataType::bfloat16 ? host::kernels::float_to_bf16(value)
                                                        : host::kernels::float_to_fp16(value);
  std::memcpy(target, &bits, 2);
}

std::int64_t load_integer(DataType type, const std::byte* element) {
  switch (type) {
    case DataType::int32: {
      std::int32_t value = 0;
      std::memcpy(&value, element, 4);
      return value;
    }
    case DataType::int64: {
      std::int64_t value = 0;
      std::memcpy(&value, element, 8);
      return value;
    }
    default:
      return static_cast<std::int64_t>(static_cast<std::uint8_t>(*element));
  }
}

void store_integer(DataType type, std::int64_t value, std::byte* target) {
  if (type == DataType::int32) {
    const auto narrowed = static_cast<std::int32_t>(value);
    std::memcpy(target, &narrowed, 4);
  } else if (type == DataType::int64) {
    std::memcpy(target, &value, 8);
  } else {
    *target = static_cast<std::byte>(static_cast<std::uint8_t>(value));
  }
}

bool is_float(DataType type) {
  return type == DataType::float32 || type == DataType::bfloat16 || type == DataType::float16;
}

}  // namespace

World& test_world() {
  return *world_instance;
}

Bytes reference_reduce(DataType type, ReduceOp op, const std::vector<Bytes>& inputs,
                       std::int64_t begin, std::int64_t count) {
  const std::int64_t element_bytes = size_bytes(type);
  const int ranks = static_cast<int>(inputs.size());
  Bytes result(static_cast<std::size_t>(count * element_bytes));
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t at = (begin + i) * element_bytes;
    std::byte* out = result.data() + i * element_bytes;
    if (ranks == 1) {
      std::memcpy(out, inputs[0].data() + at, static_cast<std::size_t>(element_bytes));
    } else if (is_float(type)) {
      float acc = widen(type, inputs[0].data() + at);
      for (int r = 1; r < ranks; ++r) {
        const float value = widen(type, inputs[static_cast<std::size_t>(r)].data() + at);
        if (op == ReduceOp::max) {
          if (!std::isnan(acc) && (std::isnan(value) || value > acc)) acc = value;
        } else {
          acc += value;
        }
      }
      if (op == ReduceOp::avg) acc /= static_cast<float>(ranks);
      narrow(type, acc, out);
    } else {
      std::uint64_t sum = 0;
      std::int64_t max = load_integer(type, inputs[0].data() + at);
      for (int r = 0; r < ranks; ++r) {
        const std::int64_t value =
            load_integer(type, inputs[static_cast<std::size_t>(r)].data() + at);
        sum += static_cast<std::uint64_t>(value);
        max = std::max(max, value);
      }
      const auto total = static_cast<std::int64_t>(sum);
      const std::int64_t value =
          op == ReduceOp::sum ? total : (op == ReduceOp::avg ? total / ranks : max);
      store_integer(type, value, out);
    }
  }
  return result;
}

void CommTest::SetUp() {
  DeviceOptions options;
  options.memory_budget_bytes = std::int64_t{256} << 20;
  device_ = create_host_device(options);
  stream_ = device_->create_stream("comm");
  comm_ = create_comm(test_world(), *device_);
}

void CommTest::TearDown() {
  stream_->synchronize();
  comm_.reset();
  stream_.reset();
  device_.reset();
}

DeviceBuffer CommTest::upload(const Bytes& bytes) {
  const auto size = static_cast<std::int64_t>(bytes.size());
  DeviceBuffer buffer = device_->allocate(size, "comm test");
  stream_->copy(buffer.data(), bytes.data(), size, CopyKind::host_to_device);
  stream_->synchronize();
  return buffer;
}

DeviceBuffer CommTest::zeros(std::int64_t bytes) {
  DeviceBuffer buffer = device_->allocate(bytes, "comm test");
  if (bytes > 0) stream_->fill_zero(buffer.data(), bytes);
  stream_->synchronize();
  return buffer;
}

Bytes CommTest::download(const DeviceBuffer& buffer, std::int64_t bytes) {
  Bytes result(static_cast<std::size_t>(bytes));
  stream_->copy(result.data(), buffer.data(), bytes, CopyKind::device_to_host);
  stream_->synchronize();
  return result;
}

void CommTest::expect_same_on_all_ranks(const Bytes& bytes) {
  const auto size = static_cast<std::int64_t>(bytes.size());
  DeviceBuffer mine = upload(bytes);
  DeviceBuffer everyone = zeros(size * world_size());
  comm_->all_gather(*stream_, mine.data(), everyone.data(), size, DataType::uint8);
  const Bytes gathered = download(everyone, size * world_size());
  for (int r = 0; r < world_size(); ++r) {
    const bool same =
        size == 0 || std::memcmp(gathered.data() + r * size, bytes.data(), bytes.size()) == 0;
    EXPECT_TRUE(same) << "rank " << r << " holds other bits than rank " << rank();
  }
}

}  // namespace strata::gpu::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  strata::gpu::World world;
  // The abort probe (ctest gpu_comm.abort_np3): the last rank fails while the others wait in a
  // barrier it will never join; abort_other_ranks must end the job instead of leaving it hung.
  if (std::getenv("STRATA_COMM_ABORT_PROBE") != nullptr) {
    if (world.rank() == world.world_size() - 1) world.abort_other_ranks(3);
    world.barrier();
    return 0;
  }
  strata::gpu::testing::world_instance = &world;
  if (world.rank() != 0) GTEST_FLAG_SET(brief, true);
  const int result = RUN_ALL_TESTS();
  strata::gpu::testing::world_instance = nullptr;
  return result;
}
