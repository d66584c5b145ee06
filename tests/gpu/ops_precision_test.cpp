// The host backend's 16-bit ops against its fp32 ops, for the GPT-2 family (embedding, layer
// norm, matmul, attention, GELU, residual, cross-entropy), in bfloat16 and float16; the Llama
// family is in ops_precision_llama_test.cpp. Also: an fp32 op is the fp32 kernel itself, and the
// 16-bit path of an elementwise op is exactly "widen, fp32 kernel, round once".
//
// Both runs read identical values and the 16-bit path runs the fp32 kernel on them, widened
// exactly, so an output the op writes once differs from the fp32 run's only by its one rounding:
// at most u = 2^-8 (bf16) or 2^-11 (fp16) of each element, hence of the largest (the unit
// roundoff, ops_precision_fixture.h). Such outputs are held to 2u, twice that bound. fp32 outputs
// (statistics, losses, parameter gradients) come from the same kernel on the same values and must
// be bit-identical (tolerance 0). Sizes keep GPT-2 1.3B's shape (4 heads of 32, an MLP 4x wide, a
// padded vocabulary) at a small scale, with an odd sequence length.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/host/kernels/gelu.h"
#include "gpu/host/kernels/layer_norm.h"
#include "gpu/host/kernels/matmul.h"
#include "tests/gpu/ops_precision_fixture.h"

namespace strata::gpu::precision {
namespace {

// A suite of its own, so that each file instantiates its tests once.
class GptOpsPrecision : public OpsPrecision {};

namespace k = host::kernels;

constexpr i64 batch = 2;
constexpr i64 seq_len = 37;
constexpr i64 rows = batch * seq_len;
constexpr i64 channels = 128;
constexpr i64 heads = 4;
constexpr i64 hidden = 4 * channels;
constexpr i64 vocab = 501;
constexpr i64 vocab_padded = 512;

TEST_P(GptOpsPrecision, Embedding) {
  const DeviceBuffer tokens = upload(draw_tokens(rows, vocab));
  const Pair wte = input(vocab_padded * channels), wpe = input(seq_len * channels);
  const Pair dout = input(rows * channels);
  Pair out = output(rows * channels);
  Pair dwte = fp32_accumulator(vocab_padded * channels),
       dwpe = fp32_accumulator(seq_len * channels);
  for (bool r : both_runs) {
    ops_->embedding_forward(stream(), out.in(r), tokens.as<std::int32_t>(), wte.in(r), wpe.in(r),
                            nullptr, batch, seq_len, channels, vocab_padded);
    ops_->embedding_backward(stream(), dwte.floats(r), dwpe.floats(r), dout.in(r),
                             tokens.as<std::int32_t>(), batch, seq_len, channels, vocab_padded);
  }
  // A sum of two rounded values in fp32, rounded once.
  expect_close("embedding_forward out", out, 2 * u());
  // fp32 gradients: the same sums of the same values, in the same order.
  expect_close("embedding_backward dwte", dwte, 0.0);
  expect_close("embedding_backward dwpe", dwpe, 0.0);
}

TEST_P(GptOpsPrecision, LayerNorm) {
  // A residual stream with an offset, so the mean matters.
  const Pair inp = input(rows * channels, -1.0f, 3.0f);
  const Pair weight = input(channels, 0.5f, 1.5f), bias = input(channels);
  const Pair dout = input(rows * channels);
  Pair out = output(rows * channels), mean = fp32_output(rows), rstd = fp32_output(rows);
  Pair dinp = accumulator(rows * channels);
  Pair dweight = fp32_accumulator(channels), dbias = fp32_accumulator(channels);
  for (bool r : both_runs) {
    ops_->layer_norm_forward(stream(), out.in(r), mean.floats(r), rstd.floats(r), inp.in(r),
                             weight.in(r), bias.in(r), rows, channels);
    // Each run's backward reads the statistics its forward saved.
    ops_->layer_norm_backward(stream(), dinp.in(r), dweight.floats(r), dbias.floats(r), dout.in(r),
                              inp.in(r), weight.in(r), mean.floats(r), rstd.floats(r), rows,
                              channels);
  }
  expect_close("layer_norm_forward out", out, 2 * u());
  // The statistics are fp32, summed in double from the same values.
  expect_close("layer_norm_forward mean", mean, 0.0);
  expect_close("layer_norm_forward rstd", rstd, 0.0);
  // The start plus the fp32 gradient, rounded once.
  expect_close("layer_norm_backward dinp", dinp, 2 * u());
  expect_close("layer_norm_backward dweight", dweight, 0.0);
  expect_close("layer_norm_backward dbias", dbias, 0.0);
}

TEST_P(GptOpsPrecision, Matmul) {
  // The attention's input projection: channels -> 3 channels, with a bias.
  const i64 in = channels, out_channels = 3 * channels;
  const Pair inp = input(rows * in), weight = input(out_channels * in), bias = input(out_channels);
  const Pair dout = input(rows * out_channels);
  // dinp's increments sum 384 products of values in [-1, 1]: about 6.5 typical, so it starts at
  // that scale too.
  Pair out = output(rows * out_channels), dinp = accumulator(rows * in, 6.5f);
  Pair dweight = fp32_accumulator(out_channels * in), dbias = fp32_accumulator(out_channels);
  for (bool r : both_runs) {
    ops_->matmul_forward(stream(), out.in(r), inp.in(r), weight.in(r), bias.in(r), rows, in,
                         out_channels);
    ops_->matmul_backward(stream(), dinp.in(r), dweight.floats(r), dbias.floats(r), dout.in(r),
                          inp.in(r), weight.in(r), rows, in, out_channels);
  }
  // The products accumulate in fp32 from the same values; only the stores round.
  expect_close("matmul_forward out", out, 2 * u());
  expect_close("matmul_backward dinp", dinp, 2 * u());
  expect_close("matmul_backward dweight", dweight, 0.0);
  expect_close("matmul_backward dbias", dbias, 0.0);
}

TEST_P(GptOpsPrecision, MatmulGeluAndTheTiedHeadWithoutBias) {
  // The MLP's up-projection, channels -> 4 channels, fused with its GELU; and the LM head,
  // logits = x @ wte^T over the padded vocabulary, with no bias.
  const Pair inp = input(rows * channels), weight = input(hidden * channels), bias = input(hidden);
  const Pair wte = input(vocab_padded * channels);
  Pair out = output(rows * hidden), pre = output(rows * hidden);
  Pair logits = output(rows * vocab_padded);
  for (bool r : both_runs) {
    ops_->matmul_gelu_forward(stream(), out.in(r), pre.in(r), inp.in(r), weight.in(r), bias.in(r),
                              rows, channels, hidden);
    ops_->matmul_forward(stream(), logits.in(r), inp.in(r), wte.in(r), nullptr, rows, channels,
                         vocab_padded);
  }
  // The GELU reads the fp32 sum (before `pre` is rounded): out and pre are rounded once each.
  expect_close("matmul_gelu_forward out", out, 2 * u());
  expect_close("matmul_gelu_forward pre", pre, 2 * u());
  expect_close("matmul_forward logits (no bias)", logits, 2 * u());
}

TEST_P(GptOpsPrecision, Attention) {
  const i64 head_dim = channels / heads;
  // All heads with their own k and v (the GPT), and grouped-query heads, two per kv head.
  for (i64 kv_heads : {heads, heads / 2}) {
    SCOPED_TRACE("kv_heads " + std::to_string(kv_heads));
    const i64 n_qkv = rows * (heads + 2 * kv_heads) * head_dim;
    // Wide enough that some softmax rows are peaked, not near uniform.
    const Pair qkv = input(n_qkv, -2.0f, 2.0f), dout = input(rows * channels);
    Pair out = output(rows * channels), lse = fp32_output(batch * heads * seq_len);
    Pair dqkv = accumulator(n_qkv);
    for (bool r : both_runs) {
      ops_->attention_forward(stream(), out.in(r), lse.floats(r), qkv.in(r), batch, seq_len, heads,
                              kv_heads, head_dim);
      // Each run's backward reads the out its forward saved, the 16-bit run's rounded, as a
      // model's backward does.
      ops_->attention_backward(stream(), dqkv.in(r), dout.in(r), qkv.in(r), out.in(r),
                               lse.floats(r), batch, seq_len, heads, kv_heads, head_dim);
    }
    // Both runs score the same values in fp32: lse is the same bits; out is rounded once.
    expect_close("attention_forward out", out, 2 * u());
    expect_close("attention_forward lse", lse, 0.0);
    // The probabilities are recomputed in fp32 from qkv and lse, the same in both runs; the
    // 16-bit run's backward reads out(1 + d), |d| <= u, in D = dout . out, so ds = p (dp - D)
    // and with it dq and dk carry up to u of D's terms besides their own rounding (u); dv only
    // its rounding. About 2u, held to twice that.
    expect_close("attention_backward dqkv (reading the saved out)", dqkv, 4 * u());
  }
}

TEST_P(GptOpsPrecision, GeluAndResidual) {
  const i64 n = rows * hidden;
  // GELU's input is the MLP's pre-activation; wider than [-1, 1] to reach both tails.
  const Pair inp = input(n, -4.0f, 4.0f), a = input(n), b = input(n), dout = input(n);
  Pair gelu = output(n), sum = output(n);
  Pair dgelu = accumulator(n), da = accumulator(n), db = accumulator(n);
  for (bool r : both_runs) {
    ops_->gelu_forward(stream(), gelu.in(r), inp.in(r), n);
    ops_->residual_forward(stream(), sum.in(r), a.in(r), b.in(r), n);
    ops_->gelu_backward(stream(), dgelu.in(r), inp.in(r), dout.in(r), n);
    ops_->residual_backward(stream(), da.in(r), db.in(r), dout.in(r), n);
  }
  // Each output is computed in fp32 (start + increment for the gradients) and rounded once.
  expect_close("gelu_forward out", gelu, 2 * u());
  expect_close("residual_forward out", sum, 2 * u());
  expect_close("gelu_backward dinp", dgelu, 2 * u());
  expect_close("residual_backward da", da, 2 * u());
  expect_close("residual_backward db", db, 2 * u());
}

TEST_P(GptOpsPrecision, CrossEntropy) {
  // The padded columns hold values too: both runs must ignore them.
  const Pair logits = input(rows * vocab_padded, -4.0f, 4.0f);
  const DeviceBuffer targets = upload(draw_tokens(rows, vocab));
  const DeviceBuffer dlosses = upload(std::vector<float>(rows, 1.0f / static_cast<float>(rows)));
  Pair losses = fp32_output(rows), lse = fp32_output(rows), loss_mean = fp32_output(1);
  Pair dlogits = output(rows * vocab_padded);  // overwritten, not accumulated
  for (bool r : both_runs) {
    ops_->cross_entropy_forward(stream(), losses.floats(r), lse.floats(r), loss_mean.floats(r),
                                logits.in(r), targets.as<std::int32_t>(), rows, vocab,
                                vocab_padded);
    ops_->cross_entropy_backward(stream(), dlogits.in(r), logits.in(r), lse.floats(r),
                                 targets.as<std::int32_t>(), dlosses.as<float>(), rows, vocab,
                                 vocab_padded);
  }
  // The forward's outputs are fp32, from the same logits.
  expect_close("cross_entropy_forward losses", losses, 0.0);
  expect_close("cross_entropy_forward lse", lse, 0.0);
  expect_close("cross_entropy_forward loss_mean", loss_mean, 0.0);
  // (softmax - one-hot) / rows in fp32, rounded once. The smallest probabilities are fp16
  // subnormals, whose absolute error of 2^-25 is far below u of the largest gradient.
  expect_close("cross_entropy_backward dlogits", dlogits, 2 * u());
}

// The fused classifier is the forward, then the backward written over the logits, to the bit, in
// every type: what a training step computes does not change with the fusion.
TEST_P(GptOpsPrecision, CrossEntropyFusedIsTheForwardThenTheBackwardInPlace) {
  const Pair logits = input(rows * vocab_padded, -4.0f, 4.0f);
  Pair fused = output(rows * vocab_padded);
  const DeviceBuffer targets = upload(draw_tokens(rows, vocab));
  const DeviceBuffer dlosses = upload(std::vector<float>(rows, 0.5f / static_cast<float>(rows)));
  Pair losses = fp32_output(rows), lse = fp32_output(rows), loss_mean = fp32_output(1);
  Pair fused_losses = fp32_output(rows), fused_lse = fp32_output(rows);
  Pair fused_mean = fp32_output(1), dlogits = output(rows * vocab_padded);
  for (bool r : both_runs) {
    DeviceBuffer& in_place = r ? fused.reference : fused.tested;
    const DeviceBuffer& source = r ? logits.reference : logits.tested;
    std::memcpy(in_place.data(), source.data(), static_cast<std::size_t>(source.bytes()));
    const auto* target = targets.as<std::int32_t>();
    ops_->cross_entropy_forward(stream(), losses.floats(r), lse.floats(r), loss_mean.floats(r),
                                logits.in(r), target, rows, vocab, vocab_padded);
    ops_->cross_entropy_backward(stream(), dlogits.in(r), logits.in(r), lse.floats(r), target,
                                 dlosses.as<float>(), rows, vocab, vocab_padded);
    ops_->cross_entropy_fused(stream(), fused.in(r), fused_losses.floats(r), fused_lse.floats(r),
                              fused_mean.floats(r), target, dlosses.as<float>(), rows, vocab,
                              vocab_padded);
  }
  stream().synchronize();
  for (const auto& [what, a, b] :
       {std::tuple{"gradient", &fused, &dlogits}, std::tuple{"losses", &fused_losses, &losses},
        std::tuple{"lse", &fused_lse, &lse}, std::tuple{"loss_mean", &fused_mean, &loss_mean}}) {
    for (bool r : both_runs) {
      const DeviceBuffer& x = r ? a->reference : a->tested;
      const DeviceBuffer& y = r ? b->reference : b->tested;
      ASSERT_EQ(x.bytes(), y.bytes());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), static_cast<std::size_t>(x.bytes())), 0)
          << what << (r ? " (fp32 run)" : " (16-bit run)");
    }
  }
}

// The fused residual + layer norm is the two ops, to the bit, in every type.
TEST_P(GptOpsPrecision, ResidualLayerNormIsTheTwoOps) {
  const i64 n = rows * channels;
  const Pair a = input(n), b = input(n), weight = input(channels), bias = input(channels);
  Pair residual = output(n), out = output(n), two_residual = output(n), two_out = output(n);
  Pair mean = fp32_output(rows), rstd = fp32_output(rows);
  Pair two_mean = fp32_output(rows), two_rstd = fp32_output(rows);
  for (bool r : both_runs) {
    ops_->residual_layer_norm_forward(stream(), residual.in(r), out.in(r), mean.floats(r),
                                      rstd.floats(r), a.in(r), b.in(r), weight.in(r), bias.in(r),
                                      rows, channels);
    ops_->residual_forward(stream(), two_residual.in(r), a.in(r), b.in(r), n);
    ops_->layer_norm_forward(stream(), two_out.in(r), two_mean.floats(r), two_rstd.floats(r),
                             two_residual.in(r), weight.in(r), bias.in(r), rows, channels);
  }
  stream().synchronize();
  expect_same_bits("residual", residual, two_residual);
  expect_same_bits("out", out, two_out);
  expect_same_bits("mean", mean, two_mean);
  expect_same_bits("rstd", rstd, two_rstd);
}

// The 16-bit path of an elementwise op is, bit for bit, the fp32 kernel on the widened inputs
// rounded once to nearest even, with the expectation computed here from cpu_adam's conversions.
TEST_P(GptOpsPrecision, GeluAndResidualForwardAreWidenKernelRoundOnce) {
  const i64 n = 1001;
  const Pair inp = input(n, -6.0f, 6.0f), a = input(n), b = input(n);
  Pair gelu = output(n), sum = output(n);
  ops_->gelu_forward(stream(), gelu.in(false), inp.in(false), n);
  ops_->residual_forward(stream(), sum.in(false), a.in(false), b.in(false), n);
  stream().synchronize();

  const std::vector<float> x = inp.tested_values(), xa = a.tested_values(), xb = b.tested_values();
  std::vector<float> gelu_fp32(static_cast<std::size_t>(n));
  k::gelu_forward<float>(gelu_fp32.data(), x.data(), n);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    ASSERT_EQ(gelu.tested.as<std::uint16_t>()[i], to_bits(type(), gelu_fp32[i])) << "gelu " << i;
    ASSERT_EQ(sum.tested.as<std::uint16_t>()[i], to_bits(type(), xa[i] + xb[i])) << "sum " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, GptOpsPrecision, half_types(), type_name);

// On fp32 Tensors an op is the fp32 kernel itself: no copy, no rounding, the same bits.
using Fp32OpsAreTheKernels = OpsOnHost;

TEST_F(Fp32OpsAreTheKernels, MatmulForwardAndBackward) {
  const i64 in = channels, out_channels = 3 * channels;
  const std::vector<float> x = draw(rows * in, -1, 1), w = draw(out_channels * in, -1, 1),
                           bias = draw(out_channels, -1, 1), dy = draw(rows * out_channels, -1, 1),
                           dx_start = draw(rows * in, -1, 1),
                           dw_start = draw(out_channels * in, -1, 1),
                           db_start = draw(out_channels, -1, 1);
  const DeviceBuffer dev_x = upload(x), dev_w = upload(w), dev_bias = upload(bias),
                     dev_dy = upload(dy), out = upload(std::vector<float>(rows * out_channels)),
                     dx = upload(dx_start), dw = upload(dw_start), db = upload(db_start);
  ops_->matmul_forward(stream(), out.as<float>(), dev_x.as<float>(), dev_w.as<float>(),
                       dev_bias.as<float>(), rows, in, out_channels);
  ops_->matmul_backward(stream(), dx.as<float>(), dw.as<float>(), db.as<float>(),
                        dev_dy.as<float>(), dev_x.as<float>(), dev_w.as<float>(), rows, in,
                        out_channels);
  stream().synchronize();

  std::vector<float> expected_out(out.bytes() / 4), expected_dx = dx_start, expected_dw = dw_start,
                                                    expected_db = db_start;
  k::matmul_forward<float>(expected_out.data(), x.data(), w.data(), bias.data(), rows, in,
                           out_channels);
  k::matmul_backward<float>(expected_dx.data(), expected_dw.data(), expected_db.data(), dy.data(),
                            x.data(), w.data(), rows, in, out_channels);
  EXPECT_EQ(std::memcmp(out.data(), expected_out.data(), out.bytes()), 0);
  EXPECT_EQ(std::memcmp(dx.data(), expected_dx.data(), dx.bytes()), 0);
  EXPECT_EQ(std::memcmp(dw.data(), expected_dw.data(), dw.bytes()), 0);
  EXPECT_EQ(std::memcmp(db.data(), expected_db.data(), db.bytes()), 0);
}

TEST_F(Fp32OpsAreTheKernels, LayerNormForward) {
  const std::vector<float> x = draw(rows * channels, -1, 3), w = draw(channels, 0.5f, 1.5f),
                           bias = draw(channels, -1, 1);
  const DeviceBuffer dev_x = upload(x), dev_w = upload(w), dev_bias = upload(bias),
                     out = upload(std::vector<float>(rows * channels)),
                     mean = upload(std::vector<float>(rows)),
                     rstd = upload(std::vector<float>(rows));
  ops_->layer_norm_forward(stream(), out.as<float>(), mean.as<float>(), rstd.as<float>(),
                           dev_x.as<float>(), dev_w.as<float>(), dev_bias.as<float>(), rows,
                           channels);
  stream().synchronize();

  std::vector<float> expected_out(rows * channels), expected_mean(rows), expected_rstd(rows);
  k::layer_norm_forward<float>(expected_out.data(), expected_mean.data(), expected_rstd.data(),
                               x.data(), w.data(), bias.data(), rows, channels);
  EXPECT_EQ(std::memcmp(out.data(), expected_out.data(), out.bytes()), 0);
  EXPECT_EQ(std::memcmp(mean.data(), expected_mean.data(), mean.bytes()), 0);
  EXPECT_EQ(std::memcmp(rstd.data(), expected_rstd.data(), rstd.bytes()), 0);
}

// The shared measure is NaN when an element of either argument is, so no tolerance passes a NaN.
TEST(ScaledError, IsNanWhenAnyElementIsNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> expected = {1.0f, 2.0f, 3.0f};
  EXPECT_TRUE(std::isnan(k::testing::scaled_error(std::vector<float>{1.0f, nan, 3.0f}, expected)));
  EXPECT_TRUE(std::isnan(k::testing::scaled_error(expected, std::vector<float>{1.0f, 2.0f, nan})));
  EXPECT_EQ(k::testing::scaled_error(expected, expected), 0.0);
}

}  // namespace
}  // namespace strata::gpu::precision
