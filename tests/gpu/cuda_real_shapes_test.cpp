// The CUDA ops against the host ops at the shapes the models train at, where the kernels' edge
// paths run: the 1.3B GPT's (d_model 2048, 16 heads of 128, seq_len 1024, micro-batch 8: 8,192
// rows, vocab 50,304), a vocabulary padded past its last token, attention at 1,024 and 2,048
// positions, and a Llama with grouped-query attention (d_model 4096, 32 query heads over 8 kv
// heads of 128, intermediate 14,336). Each runs in float32 and in bfloat16 (the compute type of a
// "bf16" config). Outputs are NaN before every run, so an element a kernel leaves unwritten
// fails, and a NaN always fails; inputs, gradients that backward adds onto included, are drawn
// from a fresh seed on every run (printed, so a failure can be replayed with
// STRATA_CUDA_TEST_SEED) and are never zeros. A backward reads the saved tensors of
// the host's forward on both sides (mirror). Tolerances grow with each result's reduction length
// (tolerance_for), plus one rounding of the type for a 16-bit output (rounding_tolerance, see
// cuda_ops_16bit_test.cpp), and for a product's fp32 output the tensor cores' truncation
// (cuda_matmul_test.cpp). Without a usable GPU every test skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gpu/ops.h"
#include "tests/gpu/cuda_ops_fixture.h"

namespace strata::gpu {
namespace {

class CudaRealShapesTest : public CudaOpsTest, public ::testing::WithParamInterface<DataType> {
 protected:
  // 8,192 x 50,304 logits and their gradient are 1.6 GB each in fp32.
  i64 budget_bytes() const override { return i64{12} << 30; }

  DataType type() const { return GetParam(); }
};

// The 1.3B GPT of docs/benchmarks.md.
constexpr i64 gpt_batch = 8;
constexpr i64 gpt_seq_len = 1024;
constexpr i64 gpt_channels = 2048;
constexpr i64 gpt_heads = 16;  // head size 128
constexpr i64 gpt_rows = gpt_batch * gpt_seq_len;
constexpr i64 gpt_vocab = 50304;

TEST_P(CudaRealShapesTest, LayerNormAtGptShapes) {
  const DataType t = type();
  const i64 n = gpt_rows * gpt_channels;
  Pair& inp = fresh(t, n, -3.0f, 5.0f);
  Pair& weight = fresh(t, gpt_channels);
  Pair& bias = fresh(t, gpt_channels);
  Pair& out = poisoned(n, t);
  Pair& mean = poisoned(gpt_rows);
  Pair& rstd = poisoned(gpt_rows);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.layer_norm_forward(s, out.tensor(side), mean.on(side), rstd.on(side), inp.tensor(side),
                           weight.tensor(side), bias.tensor(side), gpt_rows, gpt_channels);
  });
  expect_close(out, "layer_norm_forward out", tolerance_for(t, gpt_channels));
  expect_close(mean, "layer_norm_forward mean", tolerance_for(gpt_channels));
  expect_close(rstd, "layer_norm_forward rstd", tolerance_for(gpt_channels));
  mirror(mean);
  mirror(rstd);
  Pair& dout = fresh(t, n);
  Pair& dinp = fresh(t, n);
  Pair& dweight = fresh(DataType::float32, gpt_channels);
  Pair& dbias = fresh(DataType::float32, gpt_channels);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.layer_norm_backward(s, dinp.tensor(side), dweight.on(side), dbias.on(side),
                            dout.tensor(side), inp.tensor(side), weight.tensor(side), mean.on(side),
                            rstd.on(side), gpt_rows, gpt_channels);
  });
  expect_close(dinp, "layer_norm_backward dinp", tolerance_for(t, gpt_channels));
  // Column sums over 8,192 rows: 16 slices of 512 rows, added with atomics.
  expect_close(dweight, "layer_norm_backward dweight", tolerance_for(gpt_rows));
  expect_close(dbias, "layer_norm_backward dbias", tolerance_for(gpt_rows));
}

// The attention block's qkv product (C -> 3C, with bias), the MLP's up product with its GELU
// (C -> 4C, with bias, GELU in cuBLASLt's epilogue) and its down product (4C -> C, without),
// forward and backward.
TEST_P(CudaRealShapesTest, MatmulAtGptShapes) {
  const DataType t = type();
  struct Shape {
    i64 in, out;
    bool bias, gelu;
  };
  for (const Shape& shape : {Shape{gpt_channels, 3 * gpt_channels, true, false},
                             Shape{gpt_channels, 4 * gpt_channels, true, true},
                             Shape{4 * gpt_channels, gpt_channels, false, false}}) {
    Pair& inp = fresh(t, gpt_rows * shape.in);
    Pair& weight = fresh(t, shape.out * shape.in, -0.05f, 0.05f);
    Pair& bias = fresh(t, shape.out);
    Pair& out = poisoned(gpt_rows * shape.out, t);
    Pair* pre = shape.gelu ? &poisoned(gpt_rows * shape.out, t) : nullptr;
    Pair& dout = fresh(t, gpt_rows * shape.out);
    Pair& dinp = fresh(t, gpt_rows * shape.in);
    Pair& dweight = fresh(DataType::float32, shape.out * shape.in);
    Pair& dbias = fresh(DataType::float32, shape.out);
    both([&](Ops& ops, Stream& s, Side side) {
      const ConstTensor b = shape.bias ? bias.tensor(side) : ConstTensor();
      if (shape.gelu) {
        ops.matmul_gelu_forward(s, out.tensor(side), pre->tensor(side), inp.tensor(side),
                                weight.tensor(side), b, gpt_rows, shape.in, shape.out);
      } else {
        ops.matmul_forward(s, out.tensor(side), inp.tensor(side), weight.tensor(side), b, gpt_rows,
                           shape.in, shape.out);
      }
      ops.matmul_backward(s, dinp.tensor(side), dweight.on(side),
                          shape.bias ? dbias.on(side) : nullptr, dout.tensor(side),
                          inp.tensor(side), weight.tensor(side), gpt_rows, shape.in, shape.out);
    });
    const std::string name = std::to_string(shape.in) + " -> " + std::to_string(shape.out);
    const double forward = product_tolerance(t, shape.in);
    if (shape.gelu) {
      expect_close(*pre, "matmul_gelu_forward pre " + name, forward);
      expect_close(out, "matmul_gelu_forward out " + name, forward + gelu_epilogue_tolerance);
    } else {
      expect_close(out, "matmul_forward " + name, forward);
    }
    expect_close(dinp, "matmul_backward dinp " + name, product_tolerance(t, shape.out));
    expect_close(dweight, "matmul_backward dweight " + name, sum_tolerance(t, gpt_rows));
    if (shape.bias) expect_close(dbias, "matmul_backward dbias " + name, tolerance_for(gpt_rows));
  }
}

TEST_P(CudaRealShapesTest, GeluAndResidualAtGptShapes) {
  const DataType t = type();
  const i64 n = gpt_rows * 4 * gpt_channels;  // the MLP's activation
  Pair& inp = fresh(t, n, -6.0f, 6.0f);
  Pair& out = poisoned(n, t);
  Pair& dout = fresh(t, n);
  Pair& dinp = fresh(t, n);
  Pair& residual = poisoned(n, t);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.gelu_forward(s, out.tensor(side), inp.tensor(side), n);
    ops.gelu_backward(s, dinp.tensor(side), inp.tensor(side), dout.tensor(side), n);
    ops.residual_forward(s, residual.tensor(side), dout.tensor(side), inp.tensor(side), n);
  });
  expect_close(out, "gelu_forward", tolerance_for(t, 1));
  expect_close(dinp, "gelu_backward", tolerance_for(t, 1));
  expect_equal_bits_written(residual, "residual_forward");
}

// Causal attention at the 1.3B GPT's shape (8 x 1,024 positions, 16 heads of 128), at 2,048
// positions (4 x 2,048), and with Llama 3's grouped query heads (32 over 8, at 2 x 1,024), in
// bfloat16, the type the models train in; float32 (CUDA cores throughout) at one grouped shape
// past a thousand positions, odd, to keep the host's side of the run short.
TEST_P(CudaRealShapesTest, AttentionAtModelShapes) {
  const DataType t = type();
  const std::vector<AttentionCase> cases =
      t == DataType::float32
          ? std::vector<AttentionCase>{{1, 1031, 8, 2, 128}}
          : std::vector<AttentionCase>{{gpt_batch, gpt_seq_len, gpt_heads, gpt_heads, 128},
                                       {4, 2048, gpt_heads, gpt_heads, 128},
                                       {2, 1024, 32, 8, 128}};
  for (const AttentionCase& c : cases)
    expect_attention_matches(t, c);
}

// Cross-entropy over the 1.3B GPT's 50,304 columns at 8,192 rows (the model's vocabulary is its
// padded size, every column real), and over GPT-2's 50,257 tokens padded to 50,304 (the padded
// columns' gradient is zero).
TEST_P(CudaRealShapesTest, CrossEntropyAtTheGptVocabularyAndPadded) {
  const DataType t = type();
  struct Shape {
    i64 rows, vocab, vocab_padded;
  };
  for (const Shape& shape :
       {Shape{gpt_rows, gpt_vocab, gpt_vocab}, Shape{1024, 50257, gpt_vocab}}) {
    Pair& logits = fresh(t, shape.rows * shape.vocab_padded, -8.0f, 8.0f);
    Pair& targets = fresh_tokens(shape.rows, static_cast<std::int32_t>(shape.vocab));
    Pair& losses = poisoned(shape.rows);
    Pair& lse = poisoned(shape.rows);
    Pair& loss_mean = poisoned(1);
    both([&](Ops& ops, Stream& s, Side side) {
      ops.cross_entropy_forward(s, losses.on(side), lse.on(side), loss_mean.on(side),
                                logits.tensor(side), targets.on<const std::int32_t>(side),
                                shape.rows, shape.vocab, shape.vocab_padded);
    });
    const std::string name =
        std::to_string(shape.vocab) + " of " + std::to_string(shape.vocab_padded);
    expect_close(lse, "cross_entropy_forward lse " + name, tolerance_for(shape.vocab));
    expect_close(losses, "cross_entropy_forward losses " + name, tolerance_for(shape.vocab));
    expect_close(loss_mean, "cross_entropy_forward loss_mean " + name, tolerance_for(shape.rows));
    mirror(lse);
    Pair& dlosses = poisoned(shape.rows);
    Pair& dlogits = poisoned(shape.rows * shape.vocab_padded, t);
    both([&](Ops& ops, Stream& s, Side side) {
      ops.fill(s, dlosses.on(side), 1.0f / static_cast<float>(shape.rows), shape.rows);
      ops.cross_entropy_backward(s, dlogits.tensor(side), logits.tensor(side), lse.on(side),
                                 targets.on<const std::int32_t>(side), dlosses.on(side), shape.rows,
                                 shape.vocab, shape.vocab_padded);
    });
    expect_close(dlogits, "cross_entropy_backward " + name, tolerance_for(t, shape.vocab));
  }
}

// The fused classifier at the GPT's 50,304 columns, where each thread's online maximum rescales
// its running sum many times, with -inf logits (masked columns): column 0 of every row, so that
// thread 0 meets -inf while its running maximum is still -inf, and all of the first 256 columns
// of row 0, so that every thread of a block does. No target is -inf. The loss and the gradient
// over the logits match the host's forward-then-backward, and nothing is NaN.
TEST_P(CudaRealShapesTest, CrossEntropyFusedAtTheGptVocabularyWithMinusInfinity) {
  const DataType t = type();
  constexpr i64 rows = 1024;
  constexpr i64 masked_columns = 256;
  std::vector<float> values = random_floats(rows * gpt_vocab, seed_ + next_++, -8.0f, 8.0f);
  for (i64 row = 0; row < rows; ++row)
    values[static_cast<std::size_t>(row * gpt_vocab)] = -INFINITY;
  std::fill_n(values.begin(), masked_columns, -INFINITY);
  std::vector<std::int32_t> tokens =
      random_tokens(rows, static_cast<std::int32_t>(gpt_vocab), seed_ + next_++);
  for (std::int32_t& token : tokens)
    token = token < masked_columns ? token + static_cast<std::int32_t>(masked_columns) : token;
  Pair& logits = upload_as(t, values);
  Pair& targets = upload(tokens);
  Pair& losses = poisoned(rows);
  Pair& lse = poisoned(rows);
  Pair& loss_mean = poisoned(1);
  Pair& dlosses = poisoned(rows);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.fill(s, dlosses.on(side), 1.0f / static_cast<float>(rows), rows);
    ops.cross_entropy_fused(s, logits.tensor(side), losses.on(side), lse.on(side),
                            loss_mean.on(side), targets.on<const std::int32_t>(side),
                            dlosses.on(side), rows, gpt_vocab, gpt_vocab);
  });
  expect_close(losses, "cross_entropy_fused losses with -inf", tolerance_for(gpt_vocab));
  expect_close(lse, "cross_entropy_fused lse with -inf", tolerance_for(gpt_vocab));
  expect_close(loss_mean, "cross_entropy_fused loss_mean with -inf", tolerance_for(rows));
  expect_close(logits, "cross_entropy_fused gradient with -inf", tolerance_for(t, gpt_vocab));
}

// The column sums (matmul's dbias and dweight, the norms' dweight and dbias) past 65,535 slices of
// 512 rows, where one block row per slice would pass CUDA's limit on gridDim.y: 33,553,921 rows
// of 2 channels.
TEST_P(CudaRealShapesTest, ColumnSumsPastTheGridsRowLimit) {
  const DataType t = type();
  constexpr i64 rows = i64{65535} * 512 + 1;
  constexpr i64 channels = 2;
  const i64 n = rows * channels;
  Pair& inp = fresh(t, n, -3.0f, 5.0f);
  Pair& weight = fresh(t, channels * channels);
  Pair& bias = fresh(t, channels);
  Pair& out = poisoned(n, t);
  Pair& mean = poisoned(rows);
  Pair& rstd = poisoned(rows);
  Pair& rms_rstd = poisoned(rows);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.layer_norm_forward(s, out.tensor(side), mean.on(side), rstd.on(side), inp.tensor(side),
                           weight.tensor(side), bias.tensor(side), rows, channels);
    ops.rms_norm_forward(s, out.tensor(side), rms_rstd.on(side), inp.tensor(side),
                         weight.tensor(side), 1e-5, rows, channels);
  });
  for (Pair* saved : {&mean, &rstd, &rms_rstd})
    mirror(*saved);
  Pair& dout = fresh(t, n);
  Pair& dinp = fresh(t, n);
  Pair& norm_dweight = fresh(DataType::float32, channels);
  Pair& norm_dbias = fresh(DataType::float32, channels);
  Pair& rms_dweight = fresh(DataType::float32, channels);
  Pair& matmul_dweight = fresh(DataType::float32, channels * channels);
  Pair& matmul_dbias = fresh(DataType::float32, channels);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.layer_norm_backward(s, dinp.tensor(side), norm_dweight.on(side), norm_dbias.on(side),
                            dout.tensor(side), inp.tensor(side), weight.tensor(side), mean.on(side),
                            rstd.on(side), rows, channels);
    ops.rms_norm_backward(s, dinp.tensor(side), rms_dweight.on(side), dout.tensor(side),
                          inp.tensor(side), weight.tensor(side), rms_rstd.on(side), rows, channels);
    ops.matmul_backward(s, dinp.tensor(side), matmul_dweight.on(side), matmul_dbias.on(side),
                        dout.tensor(side), inp.tensor(side), weight.tensor(side), rows, channels,
                        channels);
  });
  expect_close(norm_dweight, "layer_norm_backward dweight", tolerance_for(rows));
  expect_close(norm_dbias, "layer_norm_backward dbias", tolerance_for(rows));
  expect_close(rms_dweight, "rms_norm_backward dweight", tolerance_for(rows));
  expect_close(matmul_dweight, "matmul_backward dweight", sum_tolerance(t, rows));
  expect_close(matmul_dbias, "matmul_backward dbias", tolerance_for(rows));
}

// A Llama with grouped-query attention at 2,048 rows (2 x 1,024).
TEST_P(CudaRealShapesTest, LlamaOpsWithGroupedQueryAttention) {
  const DataType t = type();
  constexpr i64 batch = 2, seq_len = 1024, rows = batch * seq_len;
  constexpr i64 channels = 4096, heads = 32, kv_heads = 8, head_dim = 128, hidden = 14336;
  constexpr i64 qkv_width = (heads + 2 * kv_heads) * head_dim;
  std::vector<float> inv_freq(head_dim / 2);
  for (i64 i = 0; i < head_dim / 2; ++i)
    inv_freq[static_cast<std::size_t>(i)] =
        static_cast<float>(std::pow(500000.0, -2.0 * static_cast<double>(i) / head_dim));
  Pair& frequencies = upload(inv_freq);
  Pair& inp = fresh(t, rows * channels, -3.0f, 5.0f);
  Pair& weight = fresh(t, channels);
  Pair& normed = poisoned(rows * channels, t);
  Pair& rstd = poisoned(rows);
  Pair& q = fresh(t, rows * heads * head_dim);
  Pair& k = fresh(t, rows * kv_heads * head_dim);
  Pair& v = fresh(t, rows * kv_heads * head_dim);
  Pair& qkv = poisoned(rows * qkv_width, t);
  Pair& rotated = fresh(t, rows * qkv_width);
  Pair& gate = fresh(t, rows * hidden, -6.0f, 6.0f);
  Pair& up = fresh(t, rows * hidden);
  Pair& act = poisoned(rows * hidden, t);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.rms_norm_forward(s, normed.tensor(side), rstd.on(side), inp.tensor(side),
                         weight.tensor(side), 1e-5, rows, channels);
    ops.qkv_pack_forward(s, qkv.tensor(side), q.tensor(side), k.tensor(side), v.tensor(side), rows,
                         heads, kv_heads, head_dim);
    ops.rope_forward(s, rotated.tensor(side), frequencies.on(side), nullptr, batch, seq_len,
                     heads + kv_heads, head_dim, qkv_width);
    ops.swiglu_forward(s, act.tensor(side), gate.tensor(side), up.tensor(side), rows * hidden);
  });
  expect_close(normed, "rms_norm_forward", tolerance_for(t, channels));
  expect_close(rstd, "rms_norm_forward rstd", tolerance_for(channels));
  expect_equal_bits_written(qkv, "qkv_pack_forward");
  expect_close(rotated, "rope_forward", tolerance_for(t, 2));
  expect_close(act, "swiglu_forward", tolerance_for(t, 1));
  mirror(rstd);
  Pair& dout = fresh(t, rows * channels);
  Pair& dinp = fresh(t, rows * channels);
  Pair& dweight = fresh(DataType::float32, channels);
  Pair& dqkv = fresh(t, rows * qkv_width);
  Pair& dq = fresh(t, rows * heads * head_dim);
  Pair& dk = fresh(t, rows * kv_heads * head_dim);
  Pair& dv = fresh(t, rows * kv_heads * head_dim);
  Pair& drotated = fresh(t, rows * qkv_width);
  Pair& dact = fresh(t, rows * hidden);
  Pair& dgate = fresh(t, rows * hidden);
  Pair& dup = fresh(t, rows * hidden);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.rms_norm_backward(s, dinp.tensor(side), dweight.on(side), dout.tensor(side),
                          inp.tensor(side), weight.tensor(side), rstd.on(side), rows, channels);
    ops.qkv_pack_backward(s, dq.tensor(side), dk.tensor(side), dv.tensor(side), dqkv.tensor(side),
                          rows, heads, kv_heads, head_dim);
    ops.rope_backward(s, drotated.tensor(side), frequencies.on(side), batch, seq_len,
                      heads + kv_heads, head_dim, qkv_width);
    ops.swiglu_backward(s, dgate.tensor(side), dup.tensor(side), dact.tensor(side),
                        gate.tensor(side), up.tensor(side), rows * hidden);
  });
  expect_close(dinp, "rms_norm_backward dinp", tolerance_for(t, channels));
  expect_close(dweight, "rms_norm_backward dweight", tolerance_for(rows));
  // One add per element on each side, the same fp32 arithmetic: the same bits.
  expect_equal_bits_written(dq, "qkv_pack_backward dq");
  expect_equal_bits_written(dk, "qkv_pack_backward dk");
  expect_equal_bits_written(dv, "qkv_pack_backward dv");
  expect_close(drotated, "rope_backward", tolerance_for(t, 2));
  expect_close(dgate, "swiglu_backward dgate", tolerance_for(t, 1));
  expect_close(dup, "swiglu_backward dup", tolerance_for(t, 1));
}

std::string type_name(const ::testing::TestParamInfo<DataType>& info) {
  return std::string(to_string(info.param));
}

INSTANTIATE_TEST_SUITE_P(Types, CudaRealShapesTest,
                         ::testing::Values(DataType::float32, DataType::bfloat16), type_name);

}  // namespace
}  // namespace strata::gpu
