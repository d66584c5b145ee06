#pragma once

// What the CUDA op tests share: each tensor held on the host device and on the CUDA device from
// the same bytes, as float32, bfloat16 or float16; every op run on both; the results compared bit
// for bit, or within a scaled error. A NaN fails a comparison unless the test says NaN is expected
// (and then it must be NaN in the same places on both). Without a usable GPU every test skips in
// SetUp with one line saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/half_bits.h"
#include "gpu/ops.h"
#include "tests/gpu/device_test_util.h"

namespace strata::gpu {

using i64 = std::int64_t;

inline std::vector<float> random_floats(i64 n, std::uint64_t seed, float low = -1.0f,
                                        float high = 1.0f) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(static_cast<std::size_t>(n));
  for (float& value : values)
    value = distribution(engine);
  return values;
}

inline std::vector<std::int32_t> random_tokens(i64 n, std::int32_t vocab, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_int_distribution<std::int32_t> distribution(0, vocab - 1);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  for (std::int32_t& token : tokens)
    token = distribution(engine);
  return tokens;
}

// The scaled-error tolerance of an fp32 result whose elements are sums of `terms` values, added in
// another order on each backend: eight fp32 ulps times sqrt(terms) (the rounding errors of a long
// sum add like a random walk), and never below 2e-5, a few ulps of the largest value.
inline double tolerance_for(i64 terms) {
  return std::max(2e-5, 8.0 * FLT_EPSILON * std::sqrt(static_cast<double>(terms)));
}

// The scaled error of one rounding apart in `type`: both backends compute in fp32 from the same
// inputs and round once, so where their fp32 results differ by a few ulps the rounded values may
// straddle a rounding boundary and differ by one ulp of the type. For an element no larger than
// the largest, one ulp is at most 2^-7 of the largest value in bfloat16 (8 significant bits),
// 2^-10 in float16 (11), 0 in float32 (the fp32 term is tolerance_for's).
inline double rounding_tolerance(DataType type) {
  switch (type) {
    case DataType::bfloat16:
      return std::ldexp(1.0, -7);
    case DataType::float16:
      return std::ldexp(1.0, -10);
    default:
      return 0.0;
  }
}

// A result of `type` whose fp32 value sums `terms` values: rounding_tolerance + tolerance_for.
inline double tolerance_for(DataType type, i64 terms) {
  return rounding_tolerance(type) + tolerance_for(terms);
}

// A sum of k products on the GPU: for fp32, the fp32 sum's tolerance_for(k); for 16-bit inputs the
// tensor cores multiply exactly but may truncate inside their block sums (Fasi, Higham, Mikaitis
// and Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ Computer Science, 2021), an
// error that grows with k rather than with its square root: k * 2^-25 more.
inline double sum_tolerance(DataType type, i64 k) {
  const double truncation =
      type == DataType::float32 ? 0.0 : std::ldexp(static_cast<double>(k), -25);
  return tolerance_for(k) + truncation;
}

// A product's output of `type`: the sum's tolerance and one rounding of the type.
inline double product_tolerance(DataType type, i64 k) {
  return rounding_tolerance(type) + sum_tolerance(type, k);
}

// cuBLASLt does not document how its epilogue evaluates GELU's tanh, and GPU epilogues commonly
// use the tanh.approx.f32 instruction (relative error near 2^-11): matmul_gelu_forward's out is
// held to 2^-10 of its largest value beyond the product's tolerance, where the gelu kernel matches
// the host to a few fp32 ulps. erf's GELU differs from tanh's by up to 4.7e-4 (at |x| = 2.7), which
// cuda_matmul_test.cpp's TheFusedGeluIsTheTanhApproximation tells apart by its direction.
inline constexpr double gelu_epilogue_tolerance = 1.0 / 1024;

// One causal attention problem: `heads` query heads over `kv_heads` key/value heads of head_dim.
struct AttentionCase {
  i64 batch = 0;
  i64 seq_len = 0;
  i64 heads = 0;
  i64 kv_heads = 0;
  i64 head_dim = 0;

  i64 rows() const { return batch * seq_len; }
  i64 qkv_width() const { return (heads + 2 * kv_heads) * head_dim; }
  // "B2 T7 H4/2 D64", written by appending (GCC 12 warns, wrongly, on "B" + std::string).
  std::string name() const {
    std::string text = "B";
    for (const auto& [field, label] : {std::pair{batch, " T"}, std::pair{seq_len, " H"},
                                       std::pair{heads, "/"}, std::pair{kv_heads, " D"}}) {
      text += std::to_string(field);
      text += label;
    }
    text += std::to_string(head_dim);
    return text;
  }
};

// Odd toy shapes of attention: heads == kv_heads and grouped (2 and 3 query heads a kv head);
// head_dim 64 and 128 (the tensor-core kernel's in 16-bit) and 5, 40 and 256 (lanes with no column,
// and the widest head); seq_len within one chunk of 32 keys, past it, and past two tiles of 64
// with a partial one.
inline std::vector<AttentionCase> attention_toy_cases() {
  return {{2, 7, 3, 3, 64}, {2, 37, 4, 2, 128}, {1, 133, 6, 2, 64},
          {2, 9, 2, 1, 40}, {1, 70, 2, 2, 256}, {1, 5, 1, 1, 5}};
}

// attention_forward's out: each element is a sum of up to seq_len products after a dot product of
// head_dim, so the fp32 term of sum_tolerance over both; in 16-bit one rounding of out, and one
// more for the probabilities, which the tensor-core kernel rounds to the type before they multiply
// v (FlashAttention-2 does the same): that changes out by at most one unit roundoff of the type
// times max |v|, and max |out| is about max |v|, since query 0 sees only key 0 and its out is v.
inline double attention_out_tolerance(DataType type, const AttentionCase& c) {
  return 2.0 * rounding_tolerance(type) + sum_tolerance(type, c.seq_len + c.head_dim);
}

// lse (fp32): the largest score plus the log of a sum of up to seq_len exponentials.
inline double attention_lse_tolerance(DataType type, const AttentionCase& c) {
  return sum_tolerance(type, c.seq_len + c.head_dim);
}

// dqkv (accumulated, rounded once): dq sums seq_len terms, dk and dv seq_len for each query head
// of the group, each term after two dot products of head_dim, in fp32 on both backends; in 16-bit
// one rounding of dqkv, and one more for the probabilities and dS, which the tensor-core kernels
// round to the type before their products (FlashAttention-2 does the same). Those roundings are
// relative errors of at most u on terms of random sign: they move dqkv by about 0.2 ulp of the
// type (worked out in fp64 with and without them, on these tests' inputs, at the toy shapes and
// at 1,024 and 2,048 positions of head_dim 128, grouped and not), a fifth of the ulp allowed.
inline double attention_dqkv_tolerance(DataType type, const AttentionCase& c) {
  return rounding_tolerance(type) +
         tolerance_for(type, c.seq_len * (c.heads / c.kv_heads) + c.head_dim);
}

// An fp32 value stored in `type` (rounded to nearest even, base/half_bits.h) and back.
inline float round_to(DataType type, float value) {
  switch (type) {
    case DataType::bfloat16:
      return bf16_bits_to_float(float_to_bf16_bits(value));
    case DataType::float16:
      return fp16_bits_to_float(float_to_fp16_bits(value));
    default:
      return value;
  }
}

enum class Side { host, cuda };

// What a comparison does with NaN: fail on any (an output an op left unwritten is NaN, since
// outputs are poisoned), or require it in the same places on both (an op fed a NaN on purpose).
enum class NanRule { fails, same_places };

// One tensor held on both devices, its elements of `type`.
struct Pair {
  DeviceBuffer host;
  DeviceBuffer cuda;
  i64 bytes = 0;
  DataType type = DataType::float32;

  template <class T = float>
  T* on(Side side) const {
    return side == Side::host ? host.as<T>() : cuda.as<T>();
  }
  // The tensor as the ops take it.
  Tensor tensor(Side side) const { return Tensor(on<void>(side), type); }
  // The tensor `elements` further on, for a pointer that is not aligned like the buffer.
  Tensor tensor_at(Side side, i64 elements) const { return tensor(side).at(elements); }
};

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::cuda_unavailable_reason().empty()) {
      GTEST_SKIP() << testing::cuda_unavailable_reason();
    }
    DeviceOptions options;
    options.memory_budget_bytes = budget_bytes();
    host_ = create_host_device(options);
    cuda_ = open_device(options);
    ASSERT_EQ(cuda_->kind(), DeviceKind::cuda);
    host_ops_ = create_ops(*host_);
    cuda_ops_ = create_ops(*cuda_, ops_options());
    const char* replay = std::getenv("STRATA_CUDA_TEST_SEED");
    seed_ = replay != nullptr ? std::strtoull(replay, nullptr, 10) : std::random_device{}();
    std::printf("[ seed ] STRATA_CUDA_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed_));
  }

  // The budget of each device; the real shapes need more than the small ones.
  virtual i64 budget_bytes() const { return i64{256} << 20; }
  // The options of the CUDA ops (the host backend ignores them): strata's own attention kernels,
  // which these tests pin; cuda_cudnn_attention_test.cpp runs cuDNN's.
  virtual OpsOptions ops_options() const { return OpsOptions{.cudnn_attention = false}; }

  void TearDown() override {
    pairs_.clear();
    cuda_ops_.reset();
    host_ops_.reset();
  }

  Device& device(Side side) { return side == Side::host ? *host_ : *cuda_; }

  // The same bytes on both devices.
  template <class T>
  Pair& upload(const std::vector<T>& values) {
    auto bytes = static_cast<i64>(values.size() * sizeof(T));
    auto pair = std::make_unique<Pair>();
    pair->bytes = bytes;
    for (Side side : {Side::host, Side::cuda}) {
      DeviceBuffer buffer = device(side).allocate(bytes, "test tensor");
      PinnedBuffer staging = device(side).allocate_pinned(bytes);
      if (bytes > 0) std::memcpy(staging.data(), values.data(), static_cast<std::size_t>(bytes));
      device(side).compute_stream().copy(buffer.data(), staging.data(), bytes,
                                         CopyKind::host_to_device);
      device(side).compute_stream().synchronize();
      (side == Side::host ? pair->host : pair->cuda) = std::move(buffer);
    }
    pairs_.push_back(std::move(pair));
    return *pairs_.back();
  }

  // `values` rounded to `type` (the same bits on both devices).
  Pair& upload_as(DataType type, const std::vector<float>& values) {
    if (type == DataType::float32) return upload(values);
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      bits[i] = type == DataType::bfloat16 ? float_to_bf16_bits(values[i])
                                           : float_to_fp16_bits(values[i]);
    Pair& pair = upload(bits);
    pair.type = type;
    return pair;
  }

  // Values drawn from this run's seed (printed in SetUp; STRATA_CUDA_TEST_SEED replays it) in
  // [low, high), none smaller than 1e-3 in magnitude (a gradient added onto is never zero), stored
  // as `type`.
  Pair& fresh(DataType type, i64 count, float low = -1.0f, float high = 1.0f) {
    std::vector<float> values = random_floats(count, seed_ + next_++, low, high);
    for (float& value : values) {
      if (value > -1e-3f && value < 1e-3f) value = value < 0.0f ? -1e-3f : 1e-3f;
    }
    return upload_as(type, values);
  }
  Pair& fresh_tokens(i64 count, std::int32_t vocab) {
    return upload(random_tokens(count, vocab, seed_ + next_++));
  }

  Pair& zeros(i64 count) { return upload(std::vector<float>(static_cast<std::size_t>(count))); }

  // `count` elements of `type` holding NaN on both devices: an output an op should write, so that
  // an element it leaves unwritten can never pass as a result.
  Pair& poisoned(i64 count, DataType type = DataType::float32) {
    if (type == DataType::float32) {
      return upload(std::vector<float>(static_cast<std::size_t>(count), std::nanf("")));
    }
    const std::uint16_t nan = type == DataType::bfloat16 ? 0x7fc0u : 0x7e00u;
    Pair& pair = upload(std::vector<std::uint16_t>(static_cast<std::size_t>(count), nan));
    pair.type = type;
    return pair;
  }

  // The host side's bytes copied to the CUDA side: a backward then reads the same saved tensors
  // (statistics, att) on both, so its comparison measures the backward alone.
  void mirror(Pair& pair) {
    std::vector<std::uint8_t> bytes = download<std::uint8_t>(Side::host, pair);
    PinnedBuffer staging = cuda_->allocate_pinned(std::max<i64>(pair.bytes, 1));
    if (pair.bytes > 0) std::memcpy(staging.data(), bytes.data(), bytes.size());
    cuda_->compute_stream().copy(pair.cuda.data(), staging.data(), pair.bytes,
                                 CopyKind::host_to_device);
    cuda_->compute_stream().synchronize();
  }

  template <class T = float>
  std::vector<T> download(Side side, const Pair& pair) {
    std::vector<T> values(static_cast<std::size_t>(pair.bytes) / sizeof(T));
    PinnedBuffer staging = device(side).allocate_pinned(std::max<i64>(pair.bytes, 1));
    Stream& stream = device(side).compute_stream();
    stream.copy(staging.data(), side == Side::host ? pair.host.data() : pair.cuda.data(),
                pair.bytes, CopyKind::device_to_host);
    stream.synchronize();
    if (pair.bytes > 0)
      std::memcpy(values.data(), staging.data(), static_cast<std::size_t>(pair.bytes));
    return values;
  }

  // The pair's elements on `side`, widened to fp32 (exactly).
  std::vector<float> widened(Side side, const Pair& pair) {
    if (pair.type == DataType::float32) return download(side, pair);
    std::vector<std::uint16_t> bits = download<std::uint16_t>(side, pair);
    std::vector<float> values(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i)
      values[i] = pair.type == DataType::bfloat16 ? bf16_bits_to_float(bits[i])
                                                  : fp16_bits_to_float(bits[i]);
    return values;
  }

  // Runs `op(ops, stream, side)` on both devices.
  template <class Op>
  void both(Op op) {
    op(*host_ops_, host_->compute_stream(), Side::host);
    op(*cuda_ops_, cuda_->compute_stream(), Side::cuda);
    host_->synchronize();
    cuda_->synchronize();
  }

  // max |cuda - host| / max |host| within `tolerance`. NaN fails, or with NanRule::same_places
  // must sit in the same places on both sides.
  void expect_close(const Pair& pair, const std::string& what, double tolerance,
                    NanRule nan_rule = NanRule::fails) {
    expect_close_where(pair, what, tolerance, nan_rule, [](std::size_t) { return true; });
  }

  // expect_close over the columns [begin, end) of the rows of `width` elements that start `offset`
  // elements into the pair: one part of a packed tensor (dq of dqkv), against its own scale, so
  // that an error in a small part cannot hide under the largest value of another.
  void expect_close_columns(const Pair& pair, const std::string& what, double tolerance, i64 offset,
                            i64 width, i64 begin, i64 end) {
    expect_close_where(pair, what, tolerance, NanRule::fails, [=](std::size_t i) {
      const i64 element = static_cast<i64>(i) - offset;
      return element >= 0 && element % width >= begin && element % width < end;
    });
  }

  // expect_close over the elements i for which keep(i).
  template <class Keep>
  void expect_close_where(const Pair& pair, const std::string& what, double tolerance,
                          NanRule nan_rule, Keep keep) {
    std::vector<float> expected = widened(Side::host, pair);
    std::vector<float> actual = widened(Side::cuda, pair);
    ASSERT_EQ(actual.size(), expected.size());
    double max_difference = 0.0;
    double max_expected = 0.0;
    for (std::size_t i = 0; i < actual.size(); ++i) {
      if (!keep(i)) continue;
      const bool nan_here = std::isnan(actual[i]) || std::isnan(expected[i]);
      if (nan_here && nan_rule == NanRule::fails) {
        FAIL() << what << "[" << i << "] is NaN: cuda " << actual[i] << ", host " << expected[i];
      }
      ASSERT_EQ(std::isnan(actual[i]), std::isnan(expected[i]))
          << what << "[" << i << "]: cuda " << actual[i] << ", host " << expected[i];
      if (std::isnan(expected[i])) continue;
      max_difference = std::max(max_difference, std::abs(double{actual[i]} - expected[i]));
      max_expected = std::max(max_expected, std::abs(double{expected[i]}));
    }
    double error = max_difference / std::max(max_expected, 1e-30);
    std::printf("[ measured ] %s (%s): scaled error %.3g, tolerance %.3g\n", what.c_str(),
                std::string(to_string(pair.type)).c_str(), error, tolerance);
    EXPECT_LE(error, tolerance) << what;
  }

  // attention_forward and attention_backward in `type` on both devices from the same qkv, dout
  // and dqkv (which the backward adds onto): out and lse are NaN before the forward; the backward
  // then reads the host forward's out and lse on both sides (mirror), so that its comparison
  // measures the backward alone, and dq, dk and dv are each held to their own scale. qkv and dqkv
  // start `qkv_offset` elements into their buffers (an odd offset leaves them unaligned). The
  // CUDA side must take the kernels expected_attention_path names, forward and backward.
  void expect_attention_matches(DataType type, const AttentionCase& c, i64 qkv_offset = 0) {
    const OpsPathCounts paths_before = cuda_ops_->path_counts();
    const i64 qkv_count = qkv_offset + c.rows() * c.qkv_width();
    Pair& qkv = fresh(type, qkv_count, -2.0f, 2.0f);
    Pair& out = poisoned(c.rows() * c.heads * c.head_dim, type);
    Pair& lse = poisoned(c.batch * c.heads * c.seq_len);
    const std::string name = c.name() + (qkv_offset != 0 ? " unaligned" : "");
    both([&](Ops& ops, Stream& s, Side side) {
      ops.attention_forward(s, out.tensor(side), lse.on(side), qkv.tensor_at(side, qkv_offset),
                            c.batch, c.seq_len, c.heads, c.kv_heads, c.head_dim);
    });
    expect_close(out, "attention_forward out " + name, attention_out_tolerance(type, c));
    expect_close(lse, "attention_forward lse " + name, attention_lse_tolerance(type, c));
    mirror(out);
    mirror(lse);
    Pair& dout = fresh(type, c.rows() * c.heads * c.head_dim);
    // From random values, dqkv shows that the backward adds; from zeros, it is the gradient alone,
    // where an element the backward leaves unwritten stays 0 against the host's gradient.
    const std::pair<Pair*, const char*> starts[] = {
        {&fresh(type, qkv_count), " from random values"},
        {&upload_as(type, std::vector<float>(static_cast<std::size_t>(qkv_count))), " from zeros"}};
    for (const auto& [dqkv, start] : starts) {
      both([&](Ops& ops, Stream& s, Side side) {
        ops.attention_backward(s, dqkv->tensor_at(side, qkv_offset), dout.tensor(side),
                               qkv.tensor_at(side, qkv_offset), out.tensor(side), lse.on(side),
                               c.batch, c.seq_len, c.heads, c.kv_heads, c.head_dim);
      });
      const i64 q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
      const std::pair<const char*, std::pair<i64, i64>> parts[] = {
          {" dq", {0, q_width}},
          {" dk", {q_width, q_width + kv_width}},
          {" dv", {q_width + kv_width, c.qkv_width()}}};
      for (const auto& [part, columns] : parts) {
        expect_close_columns(*dqkv, "attention_backward" + std::string(part) + " " + name + start,
                             attention_dqkv_tolerance(type, c), qkv_offset, c.qkv_width(),
                             columns.first, columns.second);
      }
    }
    expect_attention_path(type, c, qkv_offset, paths_before);
  }

  enum class AttentionPath { cudnn, tensor_core, cuda_core };

  // The kernels the CUDA attention takes: the tensor cores in 16-bit at head_dim 64 and 128 with
  // qkv 16-byte aligned (dout, a buffer of its own, always is), the CUDA cores otherwise
  // (gpu/cuda/kernels/attention.h). A fixture that turns cuDNN on says where it runs instead.
  virtual AttentionPath expected_attention_path(DataType type, const AttentionCase& c,
                                                i64 qkv_offset) const {
    const bool tensor_cores = type != DataType::float32 &&
                              (c.head_dim == 64 || c.head_dim == 128) && qkv_offset * 2 % 16 == 0;
    return tensor_cores ? AttentionPath::tensor_core : AttentionPath::cuda_core;
  }

  // Since `before`: one forward and two backwards (expect_attention_matches), all on the expected
  // path.
  void expect_attention_path(DataType type, const AttentionCase& c, i64 qkv_offset,
                             const OpsPathCounts& before) {
    const OpsPathCounts after = cuda_ops_->path_counts();
    const AttentionPath path = expected_attention_path(type, c, qkv_offset);
    static constexpr const char* path_names[] = {"cuDNN", "tensor cores", "CUDA cores"};
    const std::string name = std::string(to_string(type)) + " " + c.name() + ": " +
                             path_names[static_cast<int>(path)] + " expected";
    const auto ran = [](const AttentionPathCounts& now, const AttentionPathCounts& then) {
      return std::array<i64, 3>{now.cudnn - then.cudnn, now.tensor_core - then.tensor_core,
                                now.cuda_core - then.cuda_core};
    };
    const auto expected = [&](i64 calls) {
      std::array<i64, 3> counts{};
      counts[static_cast<std::size_t>(path)] = calls;
      return counts;
    };
    EXPECT_EQ(ran(after.attention_forward, before.attention_forward), expected(1))
        << "attention_forward (cuDNN, tensor cores, CUDA cores), " << name;
    EXPECT_EQ(ran(after.attention_backward, before.attention_backward), expected(2))
        << "attention_backward (cuDNN, tensor cores, CUDA cores), " << name;
  }

  // The same bytes on both sides.
  void expect_equal_bits(const Pair& pair, const std::string& what) {
    std::vector<std::uint8_t> expected = download<std::uint8_t>(Side::host, pair);
    std::vector<std::uint8_t> actual = download<std::uint8_t>(Side::cuda, pair);
    EXPECT_EQ(actual, expected) << what;
  }

  // The same bytes on both sides and no NaN among them: for an output poisoned before the op, where
  // equal bits alone would pass an element neither side wrote.
  void expect_equal_bits_written(const Pair& pair, const std::string& what) {
    expect_equal_bits(pair, what);
    std::vector<float> values = widened(Side::cuda, pair);
    const auto nan =
        std::find_if(values.begin(), values.end(), [](float v) { return std::isnan(v); });
    EXPECT_EQ(nan, values.end()) << what << "[" << (nan - values.begin()) << "] is NaN";
  }

  std::unique_ptr<Device> host_;
  std::unique_ptr<Device> cuda_;
  std::unique_ptr<Ops> host_ops_;
  std::unique_ptr<Ops> cuda_ops_;
  std::vector<std::unique_ptr<Pair>> pairs_;
  std::uint64_t seed_ = 0;
  std::uint64_t next_ = 0;
};

}  // namespace strata::gpu
