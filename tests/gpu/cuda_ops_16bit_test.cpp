// Every CUDA op but the products (tests/gpu/cuda_matmul_test.cpp) in bfloat16 and float16 against
// the host backend's same op, on odd toy shapes. Both backends widen the same 16-bit inputs to fp32
// exactly, compute in fp32 and round each output once to nearest even with base/half_bits.h, so:
// - where the fp32 arithmetic is the same on both (one add, a copy), the results are the same bits:
//   residual_forward, residual_backward, embedding_forward, qkv_pack_forward and
//   qkv_pack_backward;
// - elsewhere the fp32 results differ by a few ulps (another summation order, the device's expf,
//   cosf) and the rounded ones by at most one ulp of the type: tolerance_for(type, terms), 2^-7 of
//   the largest value for bfloat16, 2^-10 for float16, plus the fp32 term;
// - fp32 outputs (statistics, losses, parameter gradients) are within tolerance_for(terms), as in
//   fp32, since their inputs are the same bits.
// A backward reads the saved tensors of the host's forward on both sides (mirror), so that its
// comparison is one rounding apart too. Outputs are NaN before the op and inputs come from this
// run's seed; a NaN always fails. Without a usable GPU every test skips.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "gpu/ops.h"
#include "tests/gpu/cuda_ops_fixture.h"

namespace strata::gpu {
namespace {

// batch 2, 7 positions, 12 channels in 3 heads of 4, 11 tokens padded to 16.
constexpr i64 batch = 2;
constexpr i64 seq_len = 7;
constexpr i64 channels = 12;
constexpr i64 heads = 3;
constexpr i64 vocab = 11;
constexpr i64 vocab_padded = 16;
constexpr i64 rows = batch * seq_len;

class Cuda16BitOpsTest : public CudaOpsTest, public ::testing::WithParamInterface<DataType> {
 protected:
  DataType type() const { return GetParam(); }
};

TEST_P(Cuda16BitOpsTest, AddsAndCopiesGiveTheHostsBits) {
  const i64 n = rows * channels;
  Pair& a = fresh(type(), n);
  Pair& b = fresh(type(), n);
  Pair& sum = poisoned(n, type());
  Pair& dout = fresh(type(), n);
  Pair& da = fresh(type(), n);
  Pair& db = fresh(type(), n);
  Pair& tokens = fresh_tokens(rows, vocab_padded);
  Pair& wte = fresh(type(), vocab_padded * channels);
  Pair& wpe = fresh(type(), (seq_len + 3) * channels);
  Pair& embedded = poisoned(n, type());
  Pair& token_only = poisoned(n, type());
  both([&](Ops& ops, Stream& s, Side side) {
    ops.residual_forward(s, sum.tensor(side), a.tensor(side), b.tensor(side), n);
    ops.residual_backward(s, da.tensor(side), db.tensor(side), dout.tensor(side), n);
    ops.embedding_forward(s, embedded.tensor(side), tokens.on<const std::int32_t>(side),
                          wte.tensor(side), wpe.tensor(side), nullptr, batch, seq_len, channels,
                          vocab_padded);
    ops.embedding_forward(s, token_only.tensor(side), tokens.on<const std::int32_t>(side),
                          wte.tensor(side), ConstTensor(), nullptr, batch, seq_len, channels,
                          vocab_padded);
  });
  expect_equal_bits_written(sum, "residual_forward");
  expect_equal_bits_written(da, "residual_backward da");
  expect_equal_bits_written(db, "residual_backward db");
  expect_equal_bits_written(embedded, "embedding_forward");
  expect_equal_bits_written(token_only, "embedding_forward without positions");
}

TEST_P(Cuda16BitOpsTest, GeluAndSwigluMatchTheHost) {
  const i64 n = 2049;
  Pair& x = fresh(type(), n, -6.0f, 6.0f);
  Pair& up = fresh(type(), n);
  Pair& dout = fresh(type(), n);
  Pair& gelu = poisoned(n, type());
  Pair& dgelu = fresh(type(), n);
  Pair& act = poisoned(n, type());
  Pair& dgate = fresh(type(), n);
  Pair& dup = fresh(type(), n);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.gelu_forward(s, gelu.tensor(side), x.tensor(side), n);
    ops.gelu_backward(s, dgelu.tensor(side), x.tensor(side), dout.tensor(side), n);
    ops.swiglu_forward(s, act.tensor(side), x.tensor(side), up.tensor(side), n);
    ops.swiglu_backward(s, dgate.tensor(side), dup.tensor(side), dout.tensor(side), x.tensor(side),
                        up.tensor(side), n);
  });
  expect_close(gelu, "gelu_forward", tolerance_for(type(), 1));
  expect_close(dgelu, "gelu_backward", tolerance_for(type(), 1));
  expect_close(act, "swiglu_forward", tolerance_for(type(), 1));
  expect_close(dgate, "swiglu_backward dgate", tolerance_for(type(), 1));
  expect_close(dup, "swiglu_backward dup", tolerance_for(type(), 1));
}

TEST_P(Cuda16BitOpsTest, LayerNormMatchesTheHost) {
  const i64 n = rows * channels;
  Pair& inp = fresh(type(), n, -3.0f, 5.0f);
  Pair& weight = fresh(type(), channels);
  Pair& bias = fresh(type(), channels);
  Pair& out = poisoned(n, type());
  Pair& mean = poisoned(rows);
  Pair& rstd = poisoned(rows);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.layer_norm_forward(s, out.tensor(side), mean.on(side), rstd.on(side), inp.tensor(side),
                           weight.tensor(side), bias.tensor(side), rows, channels);
  });
  expect_close(out, "layer_norm_forward out", tolerance_for(type(), channels));
  expect_close(mean, "layer_norm_forward mean", tolerance_for(channels));
  expect_close(rstd, "layer_norm_forward rstd", tolerance_for(channels));
  mirror(mean);
  mirror(rstd);
  Pair& dout = fresh(type(), n);
  Pair& dinp = fresh(type(), n);
  Pair& dweight = fresh(DataType::float32, channels);
  Pair& dbias = fresh(DataType::float32, channels);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.layer_norm_backward(s, dinp.tensor(side), dweight.on(side), dbias.on(side),
                            dout.tensor(side), inp.tensor(side), weight.tensor(side), mean.on(side),
                            rstd.on(side), rows, channels);
  });
  expect_close(dinp, "layer_norm_backward dinp", tolerance_for(type(), channels));
  expect_close(dweight, "layer_norm_backward dweight", tolerance_for(rows));
  expect_close(dbias, "layer_norm_backward dbias", tolerance_for(rows));
}

TEST_P(Cuda16BitOpsTest, EmbeddingBackwardMatchesTheHost) {
  Pair& tokens = fresh_tokens(rows, vocab_padded);
  Pair& dout = fresh(type(), rows * channels);
  Pair& dwte = fresh(DataType::float32, vocab_padded * channels);
  Pair& dwpe = fresh(DataType::float32, (seq_len + 3) * channels);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.embedding_backward(s, dwte.on(side), dwpe.on(side), dout.tensor(side),
                           tokens.on<const std::int32_t>(side), batch, seq_len, channels,
                           vocab_padded);
  });
  expect_close(dwte, "embedding_backward dwte", tolerance_for(rows));
  expect_close(dwpe, "embedding_backward dwpe", tolerance_for(batch));
}

// head_dim 64 and 128 run on the tensor cores, forward and backward, where qkv is 16-byte aligned
// (the toy cases at those widths: grouped heads, seq_len 7, 37 and 133, a partial last tile in
// each), and on CUDA cores otherwise, as every other head_dim does (gpu/cuda/kernels/attention.h);
// the last case is a tensor-core shape one element off alignment.
TEST_P(Cuda16BitOpsTest, AttentionMatchesTheHost) {
  for (const AttentionCase& c : attention_toy_cases())
    expect_attention_matches(type(), c);
  expect_attention_matches(type(), AttentionCase{2, 37, 4, 2, 64}, 1);
}

// The tensor-core kernels at head_dim 128 over several tiles of 64 rows with a ragged last one:
// one row past two tiles, a last tile one row short, and a grouped case of three query heads per
// kv head whose last tile is half full.
TEST_P(Cuda16BitOpsTest, AttentionOverRaggedTilesAtHeadDim128MatchesTheHost) {
  for (const AttentionCase& c : {AttentionCase{1, 129, 2, 2, 128}, AttentionCase{2, 191, 4, 2, 128},
                                 AttentionCase{1, 224, 6, 2, 128}})
    expect_attention_matches(type(), c);
}

TEST_P(Cuda16BitOpsTest, CrossEntropyMatchesTheHost) {
  Pair& logits = fresh(type(), rows * vocab_padded, -4.0f, 4.0f);
  Pair& targets = fresh_tokens(rows, static_cast<std::int32_t>(vocab));
  Pair& losses = poisoned(rows);
  Pair& lse = poisoned(rows);
  Pair& loss_mean = poisoned(1);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.cross_entropy_forward(s, losses.on(side), lse.on(side), loss_mean.on(side),
                              logits.tensor(side), targets.on<const std::int32_t>(side), rows,
                              vocab, vocab_padded);
  });
  expect_close(losses, "cross_entropy_forward losses", tolerance_for(vocab));
  expect_close(lse, "cross_entropy_forward lse", tolerance_for(vocab));
  expect_close(loss_mean, "cross_entropy_forward loss_mean", tolerance_for(rows));
  mirror(lse);
  Pair& dlosses = poisoned(rows);
  Pair& dlogits = poisoned(rows * vocab_padded, type());
  both([&](Ops& ops, Stream& s, Side side) {
    ops.fill(s, dlosses.on(side), 1.0f / static_cast<float>(rows), rows);
    ops.cross_entropy_backward(s, dlogits.tensor(side), logits.tensor(side), lse.on(side),
                               targets.on<const std::int32_t>(side), dlosses.on(side), rows, vocab,
                               vocab_padded);
  });
  expect_close(dlogits, "cross_entropy_backward (overwrites, pads zeroed)",
               tolerance_for(type(), 1));
}

// The Llama family: RMSNorm, grouped-query packing (two query heads of 6 over one kv head), the
// rotary embedding in place on the packed q and k, and its transpose on a gradient.
TEST_P(Cuda16BitOpsTest, LlamaOpsMatchTheHost) {
  constexpr i64 q_heads = 2, kv_heads = 1, head_dim = 6;
  constexpr i64 width = q_heads * head_dim, kv_width = kv_heads * head_dim;
  constexpr i64 qkv_width = width + 2 * kv_width;
  Pair& inp = fresh(type(), rows * channels, -3.0f, 5.0f);
  Pair& weight = fresh(type(), channels);
  Pair& normed = poisoned(rows * channels, type());
  Pair& rstd = poisoned(rows);
  Pair& frequencies = upload(std::vector<float>{1.0f, 0.1f, 0.01f});
  Pair& q = fresh(type(), rows * width);
  Pair& k = fresh(type(), rows * kv_width);
  Pair& v = fresh(type(), rows * kv_width);
  Pair& qkv = poisoned(rows * qkv_width, type());
  Pair& rotated = fresh(type(), rows * qkv_width);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.rms_norm_forward(s, normed.tensor(side), rstd.on(side), inp.tensor(side),
                         weight.tensor(side), 1e-6, rows, channels);
    ops.qkv_pack_forward(s, qkv.tensor(side), q.tensor(side), k.tensor(side), v.tensor(side), rows,
                         q_heads, kv_heads, head_dim);
    ops.rope_forward(s, rotated.tensor(side), frequencies.on(side), nullptr, batch, seq_len,
                     q_heads + kv_heads, head_dim, qkv_width);
  });
  expect_close(normed, "rms_norm_forward", tolerance_for(type(), channels));
  expect_close(rstd, "rms_norm_forward rstd", tolerance_for(channels));
  expect_equal_bits_written(qkv, "qkv_pack_forward");
  expect_close(rotated, "rope_forward", tolerance_for(type(), 2));
  mirror(rstd);
  Pair& dout = fresh(type(), rows * channels);
  Pair& dinp = fresh(type(), rows * channels);
  Pair& dweight = fresh(DataType::float32, channels);
  Pair& dqkv = fresh(type(), rows * qkv_width);
  Pair& dq = fresh(type(), rows * width);
  Pair& dk = fresh(type(), rows * kv_width);
  Pair& dv = fresh(type(), rows * kv_width);
  Pair& drotated = fresh(type(), rows * qkv_width);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.rms_norm_backward(s, dinp.tensor(side), dweight.on(side), dout.tensor(side),
                          inp.tensor(side), weight.tensor(side), rstd.on(side), rows, channels);
    ops.qkv_pack_backward(s, dq.tensor(side), dk.tensor(side), dv.tensor(side), dqkv.tensor(side),
                          rows, q_heads, kv_heads, head_dim);
    ops.rope_backward(s, drotated.tensor(side), frequencies.on(side), batch, seq_len,
                      q_heads + kv_heads, head_dim, qkv_width);
  });
  expect_close(dinp, "rms_norm_backward dinp", tolerance_for(type(), channels));
  expect_close(dweight, "rms_norm_backward dweight", tolerance_for(rows));
  // One add per element on each side, the same fp32 arithmetic: the same bits.
  expect_equal_bits_written(dq, "qkv_pack_backward dq");
  expect_equal_bits_written(dk, "qkv_pack_backward dk");
  expect_equal_bits_written(dv, "qkv_pack_backward dv");
  expect_close(drotated, "rope_backward", tolerance_for(type(), 2));
}

std::string type_name(const ::testing::TestParamInfo<DataType>& info) {
  return std::string(to_string(info.param));
}

INSTANTIATE_TEST_SUITE_P(Types, Cuda16BitOpsTest,
                         ::testing::Values(DataType::bfloat16, DataType::float16), type_name);

}  // namespace
}  // namespace strata::gpu
