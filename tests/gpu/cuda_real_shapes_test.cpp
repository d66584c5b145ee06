// The CUDA ops against the host ops at the shapes the models train at, where the kernels' edge
// paths run: the 1.3B GPT's (d_model 2048, 16 heads of 128, seq_len 1024, micro-batch 8: 8,192
// rows, vocab 50,304), a vocabulary padded past its last token, attention past the 48 KiB of
// shared memory a block gets without opting in, and a Llama with grouped-query attention
// (d_model 4096, 32 query heads over 8 kv heads of 128, intermediate 14,336). Outputs are NaN
// before every run, so an element a kernel leaves unwritten fails; inputs, gradients that
// backward adds onto included, are drawn from a fresh seed on every run (printed, so a failure
// can be replayed with STRATA_CUDA_SHAPES_SEED) and are never zeros. Tolerances grow with each
// result's reduction length (tolerance_for). Without a usable GPU every test skips.
#include <gtest/gtest.h>

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

class CudaRealShapesTest : public CudaOpsTest {
 protected:
  // 8,192 x 50,304 logits and their gradient are 1.6 GB each.
  i64 budget_bytes() const override { return i64{12} << 30; }

  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    const char* replay = std::getenv("STRATA_CUDA_SHAPES_SEED");
    seed_ = replay != nullptr ? std::strtoull(replay, nullptr, 10) : std::random_device{}();
    std::printf("[ seed ] STRATA_CUDA_SHAPES_SEED=%llu\n", static_cast<unsigned long long>(seed_));
  }

  // Fresh values in [low, high), none smaller than 1e-3 in magnitude.
  Pair& fresh(i64 count, float low = -1.0f, float high = 1.0f) {
    std::vector<float> values = random_floats(count, seed_ + next_++, low, high);
    for (float& value : values) {
      if (value > -1e-3f && value < 1e-3f) value = value < 0.0f ? -1e-3f : 1e-3f;
    }
    return upload(values);
  }
  Pair& fresh_tokens(i64 count, std::int32_t vocab) {
    return upload(random_tokens(count, vocab, seed_ + next_++));
  }

  std::uint64_t seed_ = 0;
  std::uint64_t next_ = 0;
};

// The 1.3B GPT of docs/benchmarks.md.
constexpr i64 gpt_batch = 8;
constexpr i64 gpt_seq_len = 1024;
constexpr i64 gpt_channels = 2048;
constexpr i64 gpt_heads = 16;  // head size 128
constexpr i64 gpt_rows = gpt_batch * gpt_seq_len;
constexpr i64 gpt_vocab = 50304;

TEST_F(CudaRealShapesTest, LayerNormAtGptShapes) {
  const i64 n = gpt_rows * gpt_channels;
  Pair& inp = fresh(n, -3.0f, 5.0f);
  Pair& weight = fresh(gpt_channels);
  Pair& bias = fresh(gpt_channels);
  Pair& out = poisoned(n);
  Pair& mean = poisoned(gpt_rows);
  Pair& rstd = poisoned(gpt_rows);
  Pair& dout = fresh(n);
  Pair& dinp = fresh(n);
  Pair& dweight = fresh(gpt_channels);
  Pair& dbias = fresh(gpt_channels);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.layer_norm_forward(s, out.on(side), mean.on(side), rstd.on(side), inp.on(side),
                           weight.on(side), bias.on(side), gpt_rows, gpt_channels);
    ops.layer_norm_backward(s, dinp.on(side), dweight.on(side), dbias.on(side), dout.on(side),
                            inp.on(side), weight.on(side), mean.on(side), rstd.on(side), gpt_rows,
                            gpt_channels);
  });
  expect_close(out, "layer_norm_forward out", tolerance_for(gpt_channels));
  expect_close(mean, "layer_norm_forward mean", tolerance_for(gpt_channels));
  expect_close(rstd, "layer_norm_forward rstd", tolerance_for(gpt_channels));
  expect_close(dinp, "layer_norm_backward dinp", tolerance_for(gpt_channels));
  // Column sums over 8,192 rows: 16 slices of 512 rows, added with atomics.
  expect_close(dweight, "layer_norm_backward dweight", tolerance_for(gpt_rows));
  expect_close(dbias, "layer_norm_backward dbias", tolerance_for(gpt_rows));
}

// The attention block's qkv product (C -> 3C, with bias) and the MLP's down product (4C -> C,
// without), forward and backward.
TEST_F(CudaRealShapesTest, MatmulAtGptShapes) {
  struct Shape {
    i64 in, out;
    bool bias;
  };
  for (const Shape& shape : {Shape{gpt_channels, 3 * gpt_channels, true},
                             Shape{4 * gpt_channels, gpt_channels, false}}) {
    Pair& inp = fresh(gpt_rows * shape.in);
    Pair& weight = fresh(shape.out * shape.in, -0.05f, 0.05f);
    Pair& bias = fresh(shape.out);
    Pair& out = poisoned(gpt_rows * shape.out);
    Pair& dout = fresh(gpt_rows * shape.out);
    Pair& dinp = fresh(gpt_rows * shape.in);
    Pair& dweight = fresh(shape.out * shape.in);
    Pair& dbias = fresh(shape.out);
    both([&](Ops& ops, Stream& s, Side side) {
      ops.matmul_forward(s, out.on(side), inp.on(side), weight.on(side),
                         shape.bias ? bias.on(side) : nullptr, gpt_rows, shape.in, shape.out);
      ops.matmul_backward(s, dinp.on(side), dweight.on(side), shape.bias ? dbias.on(side) : nullptr,
                          dout.on(side), inp.on(side), weight.on(side), gpt_rows, shape.in,
                          shape.out);
    });
    const std::string name = std::to_string(shape.in) + " -> " + std::to_string(shape.out);
    expect_close(out, "matmul_forward " + name, tolerance_for(shape.in));
    expect_close(dinp, "matmul_backward dinp " + name, tolerance_for(shape.out));
    expect_close(dweight, "matmul_backward dweight " + name, tolerance_for(gpt_rows));
    if (shape.bias) expect_close(dbias, "matmul_backward dbias " + name, tolerance_for(gpt_rows));
  }
}

TEST_F(CudaRealShapesTest, GeluAndResidualAtGptShapes) {
  const i64 n = gpt_rows * 4 * gpt_channels;  // the MLP's activation
  Pair& inp = fresh(n, -6.0f, 6.0f);
  Pair& out = poisoned(n);
  Pair& dout = fresh(n);
  Pair& dinp = fresh(n);
  Pair& residual = poisoned(n);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.gelu_forward(s, out.on(side), inp.on(side), n);
    ops.gelu_backward(s, dinp.on(side), inp.on(side), dout.on(side), n);
    ops.residual_forward(s, residual.on(side), out.on(side), inp.on(side), n);
  });
  expect_close(out, "gelu_forward", tolerance_for(1));
  expect_close(dinp, "gelu_backward", tolerance_for(1));
  expect_close(residual, "residual_forward", tolerance_for(1));
}

// Causal attention over 1,024 positions in 16 heads of 128 (att is B x NH x T x T), and over
// 12,289 positions, one past what fits the shared memory a block gets without opting in.
TEST_F(CudaRealShapesTest, AttentionAtGptShapesAndPastTheSharedMemoryOptIn) {
  struct Shape {
    i64 batch, seq_len, channels, heads;
  };
  for (const Shape& shape :
       {Shape{gpt_batch, gpt_seq_len, gpt_channels, gpt_heads}, Shape{1, 12289, 64, 2}}) {
    const i64 rows = shape.batch * shape.seq_len;
    Pair& qkv = fresh(rows * 3 * shape.channels, -2.0f, 2.0f);
    Pair& out = poisoned(rows * shape.channels);
    Pair& att = poisoned(shape.batch * shape.heads * shape.seq_len * shape.seq_len);
    Pair& dout = fresh(rows * shape.channels);
    Pair& dqkv = fresh(rows * 3 * shape.channels);
    both([&](Ops& ops, Stream& s, Side side) {
      ops.attention_forward(s, out.on(side), att.on(side), qkv.on(side), shape.batch, shape.seq_len,
                            shape.channels, shape.heads);
      ops.attention_backward(s, dqkv.on(side), dout.on(side), qkv.on(side), att.on(side),
                             shape.batch, shape.seq_len, shape.channels, shape.heads);
    });
    const std::string name = "T " + std::to_string(shape.seq_len);
    expect_close(out, "attention_forward out " + name, tolerance_for(shape.seq_len));
    expect_close(att, "attention_forward att " + name, tolerance_for(shape.seq_len));
    expect_close(dqkv, "attention_backward dqkv " + name, tolerance_for(shape.seq_len));
  }
}

// Cross-entropy over the 1.3B GPT's 50,304 columns at 8,192 rows (the model's vocabulary is its
// padded size, every column real), and over GPT-2's 50,257 tokens padded to 50,304 (the padded
// columns' gradient is zero).
TEST_F(CudaRealShapesTest, CrossEntropyAtTheGptVocabularyAndPadded) {
  struct Shape {
    i64 rows, vocab, vocab_padded;
  };
  for (const Shape& shape :
       {Shape{gpt_rows, gpt_vocab, gpt_vocab}, Shape{1024, 50257, gpt_vocab}}) {
    Pair& logits = fresh(shape.rows * shape.vocab_padded, -8.0f, 8.0f);
    Pair& targets = fresh_tokens(shape.rows, static_cast<std::int32_t>(shape.vocab));
    Pair& losses = poisoned(shape.rows);
    Pair& lse = poisoned(shape.rows);
    Pair& loss_mean = poisoned(1);
    Pair& dlosses = poisoned(shape.rows);
    Pair& dlogits = poisoned(shape.rows * shape.vocab_padded);
    both([&](Ops& ops, Stream& s, Side side) {
      ops.cross_entropy_forward(s, losses.on(side), lse.on(side), loss_mean.on(side),
                                logits.on(side), targets.on<const std::int32_t>(side), shape.rows,
                                shape.vocab, shape.vocab_padded);
      ops.fill(s, dlosses.on(side), 1.0f / static_cast<float>(shape.rows), shape.rows);
      ops.cross_entropy_backward(s, dlogits.on(side), logits.on(side), lse.on(side),
                                 targets.on<const std::int32_t>(side), dlosses.on(side), shape.rows,
                                 shape.vocab, shape.vocab_padded);
    });
    const std::string name =
        std::to_string(shape.vocab) + " of " + std::to_string(shape.vocab_padded);
    expect_close(lse, "cross_entropy_forward lse " + name, tolerance_for(shape.vocab));
    expect_close(losses, "cross_entropy_forward losses " + name, tolerance_for(shape.vocab));
    expect_close(loss_mean, "cross_entropy_forward loss_mean " + name, tolerance_for(shape.rows));
    expect_close(dlogits, "cross_entropy_backward " + name, tolerance_for(shape.vocab));
  }
}

// A Llama with grouped-query attention at 2,048 rows (2 x 1,024).
TEST_F(CudaRealShapesTest, LlamaOpsWithGroupedQueryAttention) {
  constexpr i64 batch = 2, seq_len = 1024, rows = batch * seq_len;
  constexpr i64 channels = 4096, heads = 32, kv_heads = 8, head_dim = 128, hidden = 14336;
  std::vector<float> inv_freq(head_dim / 2);
  for (i64 i = 0; i < head_dim / 2; ++i)
    inv_freq[static_cast<std::size_t>(i)] =
        static_cast<float>(std::pow(500000.0, -2.0 * static_cast<double>(i) / head_dim));
  Pair& frequencies = upload(inv_freq);
  Pair& inp = fresh(rows * channels, -3.0f, 5.0f);
  Pair& weight = fresh(channels);
  Pair& normed = poisoned(rows * channels);
  Pair& rstd = poisoned(rows);
  Pair& dout = fresh(rows * channels);
  Pair& dinp = fresh(rows * channels);
  Pair& dweight = fresh(channels);
  Pair& q = fresh(rows * heads * head_dim);
  Pair& k = fresh(rows * kv_heads * head_dim);
  Pair& v = fresh(rows * kv_heads * head_dim);
  Pair& qkv = poisoned(rows * 3 * heads * head_dim);
  Pair& dqkv = fresh(rows * 3 * heads * head_dim);
  Pair& dq = fresh(rows * heads * head_dim);
  Pair& dk = fresh(rows * kv_heads * head_dim);
  Pair& dv = fresh(rows * kv_heads * head_dim);
  Pair& gate = fresh(rows * hidden, -6.0f, 6.0f);
  Pair& up = fresh(rows * hidden);
  Pair& act = poisoned(rows * hidden);
  Pair& dact = fresh(rows * hidden);
  Pair& dgate = fresh(rows * hidden);
  Pair& dup = fresh(rows * hidden);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.rms_norm_forward(s, normed.on(side), rstd.on(side), inp.on(side), weight.on(side), 1e-5,
                         rows, channels);
    ops.rms_norm_backward(s, dinp.on(side), dweight.on(side), dout.on(side), inp.on(side),
                          weight.on(side), rstd.on(side), rows, channels);
    ops.qkv_pack_forward(s, qkv.on(side), q.on(side), k.on(side), v.on(side), rows, heads, kv_heads,
                         head_dim);
    ops.rope_forward(s, qkv.on(side), frequencies.on(side), batch, seq_len, 2 * heads, head_dim,
                     3 * heads * head_dim);
    ops.rope_backward(s, dqkv.on(side), frequencies.on(side), batch, seq_len, 2 * heads, head_dim,
                      3 * heads * head_dim);
    ops.qkv_pack_backward(s, dq.on(side), dk.on(side), dv.on(side), dqkv.on(side), rows, heads,
                          kv_heads, head_dim);
    ops.swiglu_forward(s, act.on(side), gate.on(side), up.on(side), rows * hidden);
    ops.swiglu_backward(s, dgate.on(side), dup.on(side), dact.on(side), gate.on(side), up.on(side),
                        rows * hidden);
  });
  expect_close(normed, "rms_norm_forward", tolerance_for(channels));
  expect_close(rstd, "rms_norm_forward rstd", tolerance_for(channels));
  expect_close(dinp, "rms_norm_backward dinp", tolerance_for(channels));
  expect_close(dweight, "rms_norm_backward dweight", tolerance_for(rows));
  expect_close(qkv, "qkv_pack_forward + rope_forward", tolerance_for(1));
  expect_close(dq, "rope_backward + qkv_pack_backward dq", tolerance_for(1));
  // Each kv head's gradient sums its 4 query heads'.
  expect_close(dk, "rope_backward + qkv_pack_backward dk", tolerance_for(heads / kv_heads));
  expect_close(dv, "qkv_pack_backward dv", tolerance_for(heads / kv_heads));
  expect_close(act, "swiglu_forward", tolerance_for(1));
  expect_close(dgate, "swiglu_backward dgate", tolerance_for(1));
  expect_close(dup, "swiglu_backward dup", tolerance_for(1));
}

}  // namespace
}  // namespace strata::gpu
