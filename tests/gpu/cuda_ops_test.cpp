// The CUDA backend's ops against the host backend's on random inputs, in float32: every op of
// gpu::Ops, forward and backward, run on both devices from the same data and compared. Casts,
// fills, residuals and accumulation must match bit for bit; the rest within fp32 rounding of
// differently ordered sums (the CUDA products are fp32 cuBLASLt without TF32). A NaN fails, except
// where an op is fed one on purpose, where it must come out in the same places. bfloat16 and
// float16 are cuda_ops_16bit_test.cpp's, the products in every type cuda_matmul_test.cpp's.
// Without a usable GPU every test here skips with one line saying why; the refusal texts of
// gpu/cuda are checked everywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "gpu/cuda/backend.h"
#include "gpu/ops.h"
#include "gpu/pinned_limit.h"
#include "tests/gpu/cuda_ops_fixture.h"
#include "tests/gpu/device_test_util.h"

namespace strata::gpu {
namespace {

using ::testing::HasSubstr;
using i64 = std::int64_t;

// fp32 sums in another order: a few ulps of the largest value, with room for long dot products.
constexpr double fp32_tolerance = 2e-5;

// Odd sizes everywhere: batch 2, 7 positions, 12 channels in 3 heads of 4, 11 tokens padded to 16.
constexpr i64 batch = 2;
constexpr i64 seq_len = 7;
constexpr i64 channels = 12;
constexpr i64 heads = 3;
constexpr i64 vocab = 11;
constexpr i64 vocab_padded = 16;
constexpr i64 rows = batch * seq_len;

TEST_F(CudaOpsTest, CastsMatchTheHostBitForBitIncludingNanInfAndSubnormals) {
  std::vector<float> values = random_floats(1001, 1, -70000.0f, 70000.0f);
  std::vector<float> specials = {0.0f,
                                 -0.0f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN(),
                                 std::bit_cast<float>(0x7f800001u),  // signalling NaN
                                 std::bit_cast<float>(0xffc12345u),
                                 1e-40f,
                                 -3e-8f,
                                 5.96e-8f,
                                 65504.0f,
                                 65520.0f,
                                 1.00390625f,
                                 1.01171875f};
  values.insert(values.end(), specials.begin(), specials.end());
  const auto n = static_cast<i64>(values.size());
  Pair& source = upload(values);
  for (DataType type : {DataType::bfloat16, DataType::float16, DataType::float32}) {
    Pair& narrow =
        upload(std::vector<std::uint8_t>(static_cast<std::size_t>(n * size_bytes(type))));
    Pair& wide = zeros(n);
    both([&](Ops& ops, Stream& s, Side side) {
      ops.cast_from_float(s, narrow.on<void>(side), type, source.on(side), n);
      ops.cast_to_float(s, wide.on(side), narrow.on<const void>(side), type, n);
    });
    expect_equal_bits(narrow, "cast_from_float " + std::string(to_string(type)));
    expect_equal_bits(wide, "cast_to_float " + std::string(to_string(type)));
  }
}

// accumulate is where a contracted `target + source * scale` (one FFMA on the device, two
// roundings on the host) would show: the data is checked to tell the two apart.
TEST_F(CudaOpsTest, FillAccumulateAndResidualMatchBitForBit) {
  const i64 n = 1037;
  const std::vector<float> a_values = random_floats(n, 2);
  const std::vector<float> b_values = random_floats(n, 3);
  i64 fused_differs = 0;
  for (std::size_t i = 0; i < a_values.size(); ++i) {
    const float out = a_values[i] + b_values[i];
    volatile float product = a_values[i] * 0.375f;
    if (std::fma(a_values[i], 0.375f, out) != out + product) ++fused_differs;
  }
  ASSERT_GT(fused_differs, 0);
  Pair& a = upload(a_values);
  Pair& b = upload(b_values);
  Pair& out = zeros(n);
  Pair& da = upload(random_floats(n, 4));
  Pair& filled = zeros(n);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.residual_forward(s, out.on(side), a.on(side), b.on(side), n);
    ops.residual_backward(s, da.on(side), da.on(side), b.on(side), n);  // aliased: da += 2 b
    ops.accumulate(s, out.on(side), a.on(side), 0.375f, n);
    ops.fill(s, filled.on(side), 1.0f / 14.0f, n);
  });
  expect_equal_bits(out, "residual_forward + accumulate");
  expect_equal_bits(da, "residual_backward (aliased)");
  expect_equal_bits(filled, "fill");
}

TEST_F(CudaOpsTest, GeluForwardAndBackwardMatchAndNanStaysNan) {
  std::vector<float> x = random_floats(2049, 5, -6.0f, 6.0f);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  x[8] = 40.0f;
  x[9] = -40.0f;
  const auto n = static_cast<i64>(x.size());
  Pair& inp = upload(x);
  Pair& out = zeros(n);
  Pair& dout = upload(random_floats(n, 6));
  Pair& dinp = upload(random_floats(n, 7));
  both([&](Ops& ops, Stream& s, Side side) {
    ops.gelu_forward(s, out.on(side), inp.on(side), n);
    ops.gelu_backward(s, dinp.on(side), inp.on(side), dout.on(side), n);
  });
  expect_close(out, "gelu_forward", fp32_tolerance, NanRule::same_places);
  expect_close(dinp, "gelu_backward", fp32_tolerance, NanRule::same_places);
}

// The Llama family: RMSNorm, rotary embeddings in place (forward) and their transpose on a
// gradient (backward), SwiGLU, and grouped-query packing with its summed backward.
TEST_F(CudaOpsTest, LlamaOpsMatchTheHost) {
  Pair& inp = upload(random_floats(rows * channels, 40, -3.0f, 5.0f));
  Pair& weight = upload(random_floats(channels, 41));
  Pair& normed = zeros(rows * channels);
  Pair& rstd = zeros(rows);
  Pair& dout = upload(random_floats(rows * channels, 42));
  Pair& dinp = upload(random_floats(rows * channels, 43));
  Pair& dweight = upload(random_floats(channels, 44));
  // Two query heads of 6 channels over one kv head.
  constexpr i64 q_heads = 2, kv_heads = 1, head_dim = 6;
  std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f};
  Pair& frequencies = upload(inv_freq);
  Pair& q = upload(random_floats(rows * q_heads * head_dim, 45));
  Pair& k = upload(random_floats(rows * kv_heads * head_dim, 46));
  Pair& v = upload(random_floats(rows * kv_heads * head_dim, 47));
  constexpr i64 qkv_width = (q_heads + 2 * kv_heads) * head_dim;
  Pair& qkv = zeros(rows * qkv_width);
  Pair& dqkv = upload(random_floats(rows * qkv_width, 48));
  Pair& dq = upload(random_floats(rows * q_heads * head_dim, 49));
  Pair& dk = upload(random_floats(rows * kv_heads * head_dim, 50));
  Pair& dv = upload(random_floats(rows * kv_heads * head_dim, 51));
  Pair& gate = upload(random_floats(rows * channels, 52, -6.0f, 6.0f));
  Pair& up = upload(random_floats(rows * channels, 53));
  Pair& act = zeros(rows * channels);
  Pair& dgate = upload(random_floats(rows * channels, 54));
  Pair& dup = upload(random_floats(rows * channels, 55));
  both([&](Ops& ops, Stream& s, Side side) {
    ops.rms_norm_forward(s, normed.on(side), rstd.on(side), inp.on(side), weight.on(side), 1e-6,
                         rows, channels);
    ops.rms_norm_backward(s, dinp.on(side), dweight.on(side), dout.on(side), inp.on(side),
                          weight.on(side), rstd.on(side), rows, channels);
    ops.qkv_pack_forward(s, qkv.on(side), q.on(side), k.on(side), v.on(side), rows, q_heads,
                         kv_heads, head_dim);
    ops.rope_forward(s, qkv.on(side), frequencies.on(side), nullptr, batch, seq_len,
                     q_heads + kv_heads, head_dim, qkv_width);
    ops.rope_backward(s, dqkv.on(side), frequencies.on(side), batch, seq_len, q_heads + kv_heads,
                      head_dim, qkv_width);
    ops.qkv_pack_backward(s, dq.on(side), dk.on(side), dv.on(side), dqkv.on(side), rows, q_heads,
                          kv_heads, head_dim);
    ops.swiglu_forward(s, act.on(side), gate.on(side), up.on(side), rows * channels);
    ops.swiglu_backward(s, dgate.on(side), dup.on(side), dout.on(side), gate.on(side), up.on(side),
                        rows * channels);
  });
  expect_close(normed, "rms_norm_forward", fp32_tolerance);
  expect_close(rstd, "rms_norm_forward rstd", fp32_tolerance);
  expect_close(dinp, "rms_norm_backward dinp", fp32_tolerance);
  expect_close(dweight, "rms_norm_backward dweight", fp32_tolerance);
  expect_close(qkv, "qkv_pack_forward + rope_forward", fp32_tolerance);
  expect_close(dq, "rope_backward + qkv_pack_backward dq", fp32_tolerance);
  expect_close(dk, "rope_backward + qkv_pack_backward dk", fp32_tolerance);
  expect_close(dv, "qkv_pack_backward dv", fp32_tolerance);
  expect_close(act, "swiglu_forward", fp32_tolerance);
  expect_close(dgate, "swiglu_backward dgate", fp32_tolerance);
  expect_close(dup, "swiglu_backward dup", fp32_tolerance);
}

TEST_F(CudaOpsTest, LayerNormForwardAndBackwardMatch) {
  Pair& inp = upload(random_floats(rows * channels, 8, -3.0f, 5.0f));
  Pair& weight = upload(random_floats(channels, 9));
  Pair& bias = upload(random_floats(channels, 10));
  Pair& out = zeros(rows * channels);
  Pair& mean = zeros(rows);
  Pair& rstd = zeros(rows);
  Pair& dout = upload(random_floats(rows * channels, 11));
  Pair& dinp = upload(random_floats(rows * channels, 12));
  Pair& dweight = upload(random_floats(channels, 13));
  Pair& dbias = upload(random_floats(channels, 14));
  both([&](Ops& ops, Stream& s, Side side) {
    ops.layer_norm_forward(s, out.on(side), mean.on(side), rstd.on(side), inp.on(side),
                           weight.on(side), bias.on(side), rows, channels);
    ops.layer_norm_backward(s, dinp.on(side), dweight.on(side), dbias.on(side), dout.on(side),
                            inp.on(side), weight.on(side), mean.on(side), rstd.on(side), rows,
                            channels);
  });
  expect_close(out, "layer_norm_forward out", fp32_tolerance);
  expect_close(mean, "layer_norm_forward mean", fp32_tolerance);
  expect_close(rstd, "layer_norm_forward rstd", fp32_tolerance);
  expect_close(dinp, "layer_norm_backward dinp", fp32_tolerance);
  expect_close(dweight, "layer_norm_backward dweight", fp32_tolerance);
  expect_close(dbias, "layer_norm_backward dbias", fp32_tolerance);
}

TEST_F(CudaOpsTest, EmbeddingForwardAndBackwardMatch) {
  Pair& tokens = upload(random_tokens(rows, vocab_padded, 15));
  Pair& wte = upload(random_floats(vocab_padded * channels, 16));
  Pair& wpe = upload(random_floats((seq_len + 3) * channels, 17));
  Pair& out = zeros(rows * channels);
  Pair& dout = upload(random_floats(rows * channels, 18));
  Pair& dwte = upload(random_floats(vocab_padded * channels, 19));
  Pair& dwpe = upload(random_floats((seq_len + 3) * channels, 20));
  both([&](Ops& ops, Stream& s, Side side) {
    ops.embedding_forward(s, out.on(side), tokens.on<const std::int32_t>(side), wte.on(side),
                          wpe.on(side), nullptr, batch, seq_len, channels, vocab_padded);
    ops.embedding_backward(s, dwte.on(side), dwpe.on(side), dout.on(side),
                           tokens.on<const std::int32_t>(side), batch, seq_len, channels,
                           vocab_padded);
  });
  expect_equal_bits(out, "embedding_forward");
  expect_close(dwte, "embedding_backward dwte", fp32_tolerance);
  expect_close(dwpe, "embedding_backward dwpe", fp32_tolerance);
}

TEST_F(CudaOpsTest, MatmulForwardAndBackwardMatchWithAndWithoutBias) {
  const i64 in = 37;
  const i64 out_channels = 29;
  const i64 m = 45;
  Pair& inp = upload(random_floats(m * in, 21));
  Pair& weight = upload(random_floats(out_channels * in, 22));
  Pair& bias = upload(random_floats(out_channels, 23));
  Pair& out = zeros(m * out_channels);
  Pair& out_no_bias = zeros(m * out_channels);
  Pair& dout = upload(random_floats(m * out_channels, 24));
  Pair& dinp = upload(random_floats(m * in, 25));
  Pair& dweight = upload(random_floats(out_channels * in, 26));
  Pair& dbias = upload(random_floats(out_channels, 27));
  both([&](Ops& ops, Stream& s, Side side) {
    ops.matmul_forward(s, out.on(side), inp.on(side), weight.on(side), bias.on(side), m, in,
                       out_channels);
    ops.matmul_forward(s, out_no_bias.on(side), inp.on(side), weight.on(side), nullptr, m, in,
                       out_channels);
    ops.matmul_backward(s, dinp.on(side), dweight.on(side), dbias.on(side), dout.on(side),
                        inp.on(side), weight.on(side), m, in, out_channels);
  });
  expect_close(out, "matmul_forward", fp32_tolerance);
  expect_close(out_no_bias, "matmul_forward without bias", fp32_tolerance);
  expect_close(dinp, "matmul_backward dinp", fp32_tolerance);
  expect_close(dweight, "matmul_backward dweight", fp32_tolerance);
  expect_close(dbias, "matmul_backward dbias", fp32_tolerance);
}

TEST_F(CudaOpsTest, AttentionForwardAndBackwardMatch) {
  for (const AttentionCase& c : attention_toy_cases())
    expect_attention_matches(DataType::float32, c);
}

// The attention kernels sum in a fixed order with no atomics: two runs from the same inputs give
// the same bits, the dqkv they add onto included: in fp32 on CUDA cores, and in bfloat16 and
// float16, whose forward and backward at head_dim 128 and 64 run on the tensor cores; grouped
// query heads, whose dk and dv sum over their group, and an odd seq_len (a partial last tile).
TEST_F(CudaOpsTest, AttentionRunsGiveTheSameBits) {
  const std::pair<DataType, i64> runs_of[] = {
      {DataType::float32, 128}, {DataType::bfloat16, 128}, {DataType::float16, 64}};
  for (const auto& [type, head_dim] : runs_of) {
    const AttentionCase c{2, 133, 4, 2, head_dim};
    Pair& qkv = fresh(type, c.rows() * c.qkv_width(), -2.0f, 2.0f);
    Pair& dout = fresh(type, c.rows() * c.heads * c.head_dim);
    Pair& start = fresh(type, c.rows() * c.qkv_width());
    std::vector<std::vector<std::uint8_t>> runs;
    for (int run = 0; run < 2; ++run) {
      Pair& out = poisoned(c.rows() * c.heads * c.head_dim, type);
      Pair& lse = poisoned(c.batch * c.heads * c.seq_len);
      Pair& dqkv = upload(download<std::uint8_t>(Side::cuda, start));
      dqkv.type = type;
      Stream& s = cuda_->compute_stream();
      cuda_ops_->attention_forward(s, out.tensor(Side::cuda), lse.on(Side::cuda),
                                   qkv.tensor(Side::cuda), c.batch, c.seq_len, c.heads, c.kv_heads,
                                   c.head_dim);
      cuda_ops_->attention_backward(s, dqkv.tensor(Side::cuda), dout.tensor(Side::cuda),
                                    qkv.tensor(Side::cuda), out.tensor(Side::cuda),
                                    lse.on(Side::cuda), c.batch, c.seq_len, c.heads, c.kv_heads,
                                    c.head_dim);
      cuda_->synchronize();
      const std::pair<const char*, const Pair*> results[] = {{"attention_forward out", &out},
                                                             {"attention_forward lse", &lse},
                                                             {"attention_backward dqkv", &dqkv}};
      for (const auto& [what, result] : results) {
        runs.push_back(download<std::uint8_t>(Side::cuda, *result));
        // Equal bits alone would pass an element that neither run wrote.
        const std::vector<float> values = widened(Side::cuda, *result);
        EXPECT_TRUE(
            std::none_of(values.begin(), values.end(), [](float v) { return std::isnan(v); }))
            << what << " holds NaN, " << to_string(type) << " " << c.name() << " run " << run;
      }
    }
    const std::string name = std::string(to_string(type)) + " " + c.name();
    EXPECT_EQ(runs[0], runs[3]) << "attention_forward out, " << name;
    EXPECT_EQ(runs[1], runs[4]) << "attention_forward lse, " << name;
    EXPECT_EQ(runs[2], runs[5]) << "attention_backward dqkv, " << name;
  }
}

TEST_F(CudaOpsTest, CrossEntropyForwardAndBackwardMatch) {
  Pair& logits = upload(random_floats(rows * vocab_padded, 31, -4.0f, 4.0f));
  Pair& targets = upload(random_tokens(rows, vocab, 32));
  Pair& losses = zeros(rows);
  Pair& lse = zeros(rows);
  Pair& loss_mean = zeros(1);
  Pair& dlosses = zeros(rows);
  Pair& dlogits = upload(std::vector<float>(static_cast<std::size_t>(rows * vocab_padded),
                                            std::numeric_limits<float>::quiet_NaN()));
  both([&](Ops& ops, Stream& s, Side side) {
    ops.cross_entropy_forward(s, losses.on(side), lse.on(side), loss_mean.on(side), logits.on(side),
                              targets.on<const std::int32_t>(side), rows, vocab, vocab_padded);
    ops.fill(s, dlosses.on(side), 1.0f / static_cast<float>(rows), rows);
    ops.cross_entropy_backward(s, dlogits.on(side), logits.on(side), lse.on(side),
                               targets.on<const std::int32_t>(side), dlosses.on(side), rows, vocab,
                               vocab_padded);
  });
  expect_close(losses, "cross_entropy_forward losses", fp32_tolerance);
  expect_close(lse, "cross_entropy_forward lse", fp32_tolerance);
  expect_close(loss_mean, "cross_entropy_forward loss_mean", fp32_tolerance);
  expect_close(dlogits, "cross_entropy_backward (overwrites, pads zeroed)", fp32_tolerance);
}

// Rows masked out of the loss (a negative target; their logits NaN, which must never be read):
// the forward, the backward and the fused op against the host's, and on the GPU a loss of 0 and a
// gradient row of exact zeros for each masked row, and a mean over the other rows only.
TEST_F(CudaOpsTest, CrossEntropyMaskedRowsMatchTheHostAndGetNoLossNorGradient) {
  std::vector<float> values = random_floats(rows * vocab_padded, 35, -4.0f, 4.0f);
  std::vector<std::int32_t> tokens = random_tokens(rows, vocab, 36);
  const std::vector<i64> masked = {0, 5, rows - 1};
  for (const i64 r : masked) {
    tokens[static_cast<std::size_t>(r)] = r == 5 ? -100 : -1;
    std::fill_n(values.begin() + r * vocab_padded, vocab_padded,
                std::numeric_limits<float>::quiet_NaN());
  }
  Pair& logits = upload(values);
  Pair& fused = upload(values);
  Pair& targets = upload(tokens);
  Pair& losses = poisoned(rows);
  Pair& lse = poisoned(rows);
  Pair& loss_mean = poisoned(1);
  Pair& fused_losses = poisoned(rows);
  Pair& fused_lse = poisoned(rows);
  Pair& fused_mean = poisoned(1);
  Pair& dlosses = zeros(rows);
  Pair& dlogits = poisoned(rows * vocab_padded);
  both([&](Ops& ops, Stream& s, Side side) {
    const auto* t = targets.on<const std::int32_t>(side);
    ops.cross_entropy_forward(s, losses.on(side), lse.on(side), loss_mean.on(side), logits.on(side),
                              t, rows, vocab, vocab_padded);
    ops.fill(s, dlosses.on(side), 0.5f, rows);
    ops.cross_entropy_backward(s, dlogits.on(side), logits.on(side), lse.on(side), t,
                               dlosses.on(side), rows, vocab, vocab_padded);
    ops.cross_entropy_fused(s, fused.on(side), fused_losses.on(side), fused_lse.on(side),
                            fused_mean.on(side), t, dlosses.on(side), rows, vocab, vocab_padded);
  });
  expect_close(losses, "masked cross_entropy_forward losses", fp32_tolerance);
  expect_close(loss_mean, "masked cross_entropy_forward loss_mean", fp32_tolerance);
  expect_close(dlogits, "masked cross_entropy_backward", fp32_tolerance);
  expect_close(fused_losses, "masked cross_entropy_fused losses", fp32_tolerance);
  expect_close(fused_mean, "masked cross_entropy_fused loss_mean", fp32_tolerance);
  expect_close(fused, "masked cross_entropy_fused gradient", fp32_tolerance);
  const std::vector<float> cuda_losses = download(Side::cuda, losses);
  double kept = 0.0;
  for (const float loss : cuda_losses)
    kept += loss;
  EXPECT_NEAR(download(Side::cuda, loss_mean)[0],
              kept / static_cast<double>(rows - static_cast<i64>(masked.size())), 1e-5);
  for (const Pair* gradient : {&dlogits, &fused}) {
    const std::vector<float> cuda_gradient = download(Side::cuda, *gradient);
    for (const i64 r : masked) {
      EXPECT_EQ(cuda_losses[static_cast<std::size_t>(r)], 0.0f) << "row " << r;
      for (i64 c = 0; c < vocab_padded; ++c)
        EXPECT_EQ(cuda_gradient[static_cast<std::size_t>(r * vocab_padded + c)], 0.0f)
            << "row " << r << " column " << c;
    }
  }
}

// The fused residual + norm kernels (the sum stored, then normalised from registers) against the
// host's two ops.
TEST_F(CudaOpsTest, ResidualLayerNormAndResidualRmsNormMatch) {
  const i64 n = rows * channels;
  Pair& a = upload(random_floats(n, 41, -1.0f, 1.0f));
  Pair& b = upload(random_floats(n, 42, -1.0f, 1.0f));
  Pair& weight = upload(random_floats(channels, 43, 0.5f, 1.5f));
  Pair& bias = upload(random_floats(channels, 44, -0.5f, 0.5f));
  Pair& residual = zeros(n);
  Pair& out = zeros(n);
  Pair& mean = zeros(rows);
  Pair& rstd = zeros(rows);
  Pair& rms_residual = zeros(n);
  Pair& rms_out = zeros(n);
  Pair& rms_rstd = zeros(rows);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.residual_layer_norm_forward(s, residual.on(side), out.on(side), mean.on(side),
                                    rstd.on(side), a.on(side), b.on(side), weight.on(side),
                                    bias.on(side), rows, channels);
    ops.residual_rms_norm_forward(s, rms_residual.on(side), rms_out.on(side), rms_rstd.on(side),
                                  a.on(side), b.on(side), weight.on(side), 1e-5, rows, channels);
  });
  expect_close(residual, "residual_layer_norm_forward residual", 0.0);
  expect_close(out, "residual_layer_norm_forward out", fp32_tolerance);
  expect_close(mean, "residual_layer_norm_forward mean", fp32_tolerance);
  expect_close(rstd, "residual_layer_norm_forward rstd", fp32_tolerance);
  expect_close(rms_residual, "residual_rms_norm_forward residual", 0.0);
  expect_close(rms_out, "residual_rms_norm_forward out", fp32_tolerance);
  expect_close(rms_rstd, "residual_rms_norm_forward rstd", fp32_tolerance);
}

// The fused classifier (one kernel per row on CUDA: an online max and sum, then the gradient
// written over the logits) against the host's forward-then-backward in place; the padded columns
// hold values that both must zero.
TEST_F(CudaOpsTest, CrossEntropyFusedMatchesAndOverwritesTheLogits) {
  Pair& logits = upload(random_floats(rows * vocab_padded, 33, -4.0f, 4.0f));
  Pair& targets = upload(random_tokens(rows, vocab, 34));
  Pair& losses = zeros(rows);
  Pair& lse = zeros(rows);
  Pair& loss_mean = zeros(1);
  Pair& dlosses = zeros(rows);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.fill(s, dlosses.on(side), 0.5f / static_cast<float>(rows), rows);
    ops.cross_entropy_fused(s, logits.on(side), losses.on(side), lse.on(side), loss_mean.on(side),
                            targets.on<const std::int32_t>(side), dlosses.on(side), rows, vocab,
                            vocab_padded);
  });
  expect_close(losses, "cross_entropy_fused losses", fp32_tolerance);
  expect_close(lse, "cross_entropy_fused lse", fp32_tolerance);
  expect_close(loss_mean, "cross_entropy_fused loss_mean", fp32_tolerance);
  expect_close(logits, "cross_entropy_fused gradient (over the logits, pads zeroed)",
               fp32_tolerance);
}

// Runs everywhere: the refusal text of cudaHostAlloc names cause and fix as the host backend's.
TEST(CudaBackendErrors, PinnedRefusalNamesTheLimitAndHowToRaiseIt) {
  UserError error = pinned_memory_refused(
      std::int64_t{3} << 30, "cudaHostAlloc failed: out of memory (cudaErrorMemoryAllocation)",
      PinnedLimit{std::int64_t{64} << 20, false}, std::int64_t{1} << 30);
  EXPECT_THAT(error.what(), HasSubstr("cudaHostAlloc failed"));
  EXPECT_THAT(error.what(), HasSubstr("3221225472 bytes"));
  EXPECT_THAT(error.what(), HasSubstr("RLIMIT_MEMLOCK"));
  EXPECT_THAT(error.what(), HasSubstr("65536 KiB"));
  EXPECT_THAT(error.fix(), HasSubstr("ulimit -l"));
  EXPECT_THAT(error.fix(), HasSubstr("4194304 KiB"));
  EXPECT_THAT(error.fix(), HasSubstr("--ulimit memlock=-1:-1"));
  UserError unlimited = pinned_memory_refused(4096, "cudaHostAlloc failed", {}, 0);
  EXPECT_THAT(unlimited.what(), HasSubstr("unlimited"));
}

// Runs everywhere: the skip line of the GPU tests says why in words.
TEST(CudaBackendErrors, TheSkipReasonIsEmptyOnlyWithAUsableGpu) {
  GpuInventory inventory = query_gpus();
  const std::string& reason = testing::cuda_unavailable_reason();
  EXPECT_EQ(reason.empty(), !inventory.gpus.empty() && inventory.probe_kernel_ran) << reason;
  if (!reason.empty()) std::printf("[ skip reason ] %s\n", reason.c_str());
}

// A decode step on both devices: the cache writes move the same bits, and the flash-decoding
// attention (three splits of a 600-position cache, sequences at 1, 300 and 600 positions, 4 query
// heads over 2 kv heads) gives the host's fused rows within fp32 rounding; the rotary and learned
// embeddings of tokens at their start positions as well.
TEST_F(CudaOpsTest, DecodeStepsMatchTheHost) {
  constexpr i64 decode_batch = 3, max_seq = 600, q_heads = 4, kv_heads = 2, head_dim = 32;
  constexpr i64 width = (q_heads + 2 * kv_heads) * head_dim;
  constexpr i64 cache = decode_batch * kv_heads * max_seq * head_dim;
  Pair& prompt = upload(random_floats(decode_batch * max_seq * width, 61));
  Pair& k_cache = zeros(cache);
  Pair& v_cache = zeros(cache);
  Pair& starts = upload(std::vector<std::int32_t>(decode_batch, 0));
  Pair& step = upload(random_floats(decode_batch * width, 62));
  Pair& lengths = upload(std::vector<std::int32_t>{1, 300, 600});
  Pair& ends = upload(std::vector<std::int32_t>{0, 299, 599});
  Pair& out = zeros(decode_batch * q_heads * head_dim);
  Pair& scratch = zeros(decode_attention_scratch(decode_batch, q_heads, head_dim, max_seq));
  Pair& frequencies = upload(random_floats(head_dim / 2, 63, 0.0f, 1.0f));
  Pair& wte = upload(random_floats(vocab * channels, 64));
  Pair& wpe = upload(random_floats(max_seq * channels, 65));
  Pair& tokens = upload(std::vector<std::int32_t>{3, 7, 10});
  Pair& embedded = zeros(decode_batch * channels);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.kv_cache_write(s, k_cache.on(side), v_cache.on(side), prompt.on(side),
                       starts.on<const std::int32_t>(side), decode_batch, max_seq, q_heads,
                       kv_heads, head_dim, max_seq);
    ops.rope_forward(s, step.on(side), frequencies.on(side), ends.on<const std::int32_t>(side),
                     decode_batch, 1, q_heads + kv_heads, head_dim, width);
    ops.kv_cache_write(s, k_cache.on(side), v_cache.on(side), step.on(side),
                       ends.on<const std::int32_t>(side), decode_batch, 1, q_heads, kv_heads,
                       head_dim, max_seq);
    ops.decode_attention(s, out.on(side), step.on(side), k_cache.on(side), v_cache.on(side),
                         lengths.on<const std::int32_t>(side), scratch.on(side), decode_batch,
                         q_heads, kv_heads, head_dim, max_seq);
    ops.embedding_forward(s, embedded.on(side), tokens.on<const std::int32_t>(side), wte.on(side),
                          wpe.on(side), ends.on<const std::int32_t>(side), decode_batch, 1,
                          channels, vocab);
  });
  expect_close(step, "rope_forward at start positions", fp32_tolerance);
  expect_close(k_cache, "kv_cache_write k (after the rotated step)", fp32_tolerance);
  expect_equal_bits(v_cache, "kv_cache_write v");
  expect_close(out, "decode_attention", fp32_tolerance);
  expect_equal_bits(embedded, "embedding_forward at start positions");
}

}  // namespace
}  // namespace strata::gpu
