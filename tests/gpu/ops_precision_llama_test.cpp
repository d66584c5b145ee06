// The host backend's 16-bit ops against its fp32 ops for the Llama family (RMSNorm, RoPE, SwiGLU,
// grouped-query packing), in bfloat16 and float16; the GPT-2 family and the reasoning behind the
// tolerances are in ops_precision_test.cpp. In short: both runs read identical values and the
// 16-bit path runs the fp32 kernel, so an output the op writes once is the fp32 output rounded
// once, at most u = 2^-8 (bf16) or 2^-11 (fp16) of the largest element, held to 2u; fp32 outputs
// must be bit-identical. Sizes keep a Llama's shape (grouped-query attention with 2 kv heads for
// 4 heads of 16, a gated MLP about 8/3 wide) at a small scale, with an odd sequence length.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/gpu/ops_precision_fixture.h"

namespace strata::gpu::precision {
namespace {

// A suite of its own, so that each file instantiates its tests once.
class LlamaOpsPrecision : public OpsPrecision {};

constexpr i64 batch = 2;
constexpr i64 seq_len = 37;
constexpr i64 rows = batch * seq_len;
constexpr i64 heads = 4;
constexpr i64 kv_heads = 2;
constexpr i64 head_dim = 16;
constexpr i64 channels = heads * head_dim;
constexpr i64 kv_channels = kv_heads * head_dim;
constexpr i64 qkv_width = channels + 2 * kv_channels;  // [q | k | v] per row
constexpr i64 hidden = 172;
constexpr double rms_eps = 1e-5;

TEST_P(LlamaOpsPrecision, RmsNorm) {
  const Pair inp = input(rows * channels, -2.0f, 2.0f), weight = input(channels, 0.5f, 1.5f);
  const Pair dout = input(rows * channels);
  Pair out = output(rows * channels), rstd = fp32_output(rows);
  Pair dinp = accumulator(rows * channels), dweight = fp32_accumulator(channels);
  for (bool r : both_runs) {
    ops_->rms_norm_forward(stream(), out.in(r), rstd.floats(r), inp.in(r), weight.in(r), rms_eps,
                           rows, channels);
    // Each run's backward reads the rstd its forward saved.
    ops_->rms_norm_backward(stream(), dinp.in(r), dweight.floats(r), dout.in(r), inp.in(r),
                            weight.in(r), rstd.floats(r), rows, channels);
  }
  expect_close("rms_norm_forward out", out, 2 * u());
  // rstd is fp32, its sum in double from the same values.
  expect_close("rms_norm_forward rstd", rstd, 0.0);
  // The start plus the fp32 gradient, rounded once.
  expect_close("rms_norm_backward dinp", dinp, 2 * u());
  expect_close("rms_norm_backward dweight", dweight, 0.0);
}

// The fused residual + RMSNorm is the two ops, to the bit, in every type.
TEST_P(LlamaOpsPrecision, ResidualRmsNormIsTheTwoOps) {
  const i64 n = rows * channels;
  const Pair a = input(n), b = input(n), weight = input(channels, 0.5f, 1.5f);
  Pair residual = output(n), out = output(n), two_residual = output(n), two_out = output(n);
  Pair rstd = fp32_output(rows), two_rstd = fp32_output(rows);
  for (bool r : both_runs) {
    ops_->residual_rms_norm_forward(stream(), residual.in(r), out.in(r), rstd.floats(r), a.in(r),
                                    b.in(r), weight.in(r), rms_eps, rows, channels);
    ops_->residual_forward(stream(), two_residual.in(r), a.in(r), b.in(r), n);
    ops_->rms_norm_forward(stream(), two_out.in(r), two_rstd.floats(r), two_residual.in(r),
                           weight.in(r), rms_eps, rows, channels);
  }
  stream().synchronize();
  expect_same_bits("residual", residual, two_residual);
  expect_same_bits("out", out, two_out);
  expect_same_bits("rstd", rstd, two_rstd);
}

// RoPE rotates in place inside the fused QKV rows, as the model calls it: the query and key
// parts as heads + kv_heads heads at the start of each row, rows qkv_width apart. The value part
// must come back with its bits unchanged, having been widened and rounded back.
TEST_P(LlamaOpsPrecision, Rope) {
  const i64 row_stride = qkv_width;
  std::vector<float> frequencies(head_dim / 2);
  for (std::size_t j = 0; j < frequencies.size(); ++j) {
    frequencies[j] = static_cast<float>(
        std::pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim)));
  }
  const DeviceBuffer inv_freq = upload(frequencies);
  Pair qkv = accumulator(rows * row_stride), dqkv = accumulator(rows * row_stride);
  for (bool r : both_runs) {
    ops_->rope_forward(stream(), qkv.in(r), inv_freq.as<float>(), nullptr, batch, seq_len,
                       heads + kv_heads, head_dim, row_stride);
    ops_->rope_backward(stream(), dqkv.in(r), inv_freq.as<float>(), batch, seq_len,
                        heads + kv_heads, head_dim, row_stride);
  }
  // Each rotated pair is computed in fp32 from the same values and rounded once.
  expect_close("rope_forward x (in place)", qkv, 2 * u());
  expect_close("rope_backward dx (in place)", dqkv, 2 * u());
  for (const Pair* rotated : {&qkv, &dqkv}) {
    const std::vector<float> values = rotated->tested_values();
    for (i64 i = 0; i < rows * row_stride; ++i) {
      if (i % row_stride < channels + kv_channels) continue;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(values[i]),
                std::bit_cast<std::uint32_t>(rotated->start[i]))
          << "value element " << i;
    }
  }
}

TEST_P(LlamaOpsPrecision, Swiglu) {
  const i64 n = rows * hidden;
  // The gate is a pre-activation: wide enough to reach both of SiLU's tails.
  const Pair gate = input(n, -4.0f, 4.0f), up = input(n), dout = input(n);
  Pair out = output(n), dgate = accumulator(n), dup = accumulator(n);
  for (bool r : both_runs) {
    ops_->swiglu_forward(stream(), out.in(r), gate.in(r), up.in(r), n);
    ops_->swiglu_backward(stream(), dgate.in(r), dup.in(r), dout.in(r), gate.in(r), up.in(r), n);
  }
  // Each output is computed in fp32 (start + increment for the gradients) and rounded once.
  expect_close("swiglu_forward out", out, 2 * u());
  expect_close("swiglu_backward dgate", dgate, 2 * u());
  expect_close("swiglu_backward dup", dup, 2 * u());
}

TEST_P(LlamaOpsPrecision, QkvPack) {
  const i64 n_q = rows * channels, n_kv = rows * kv_channels;
  const Pair q = input(n_q), k = input(n_kv), v = input(n_kv);
  const Pair dqkv = input(rows * qkv_width);
  Pair qkv = output(rows * qkv_width);
  Pair dq = accumulator(n_q), dk = accumulator(n_kv), dv = accumulator(n_kv);
  for (bool r : both_runs) {
    ops_->qkv_pack_forward(stream(), qkv.in(r), q.in(r), k.in(r), v.in(r), rows, heads, kv_heads,
                           head_dim);
    ops_->qkv_pack_backward(stream(), dq.in(r), dk.in(r), dv.in(r), dqkv.in(r), rows, heads,
                            kv_heads, head_dim);
  }
  // The forward copies values the type holds exactly: its rounding changes nothing.
  expect_close("qkv_pack_forward qkv", qkv, 0.0);
  // The start plus its element of dqkv, in fp32, rounded once.
  expect_close("qkv_pack_backward dq", dq, 2 * u());
  expect_close("qkv_pack_backward dk", dk, 2 * u());
  expect_close("qkv_pack_backward dv", dv, 2 * u());
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, LlamaOpsPrecision, half_types(), type_name);

}  // namespace
}  // namespace strata::gpu::precision
