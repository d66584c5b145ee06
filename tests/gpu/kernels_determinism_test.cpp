// Every kernel gives the same bits on every run and for any thread count: oneTBB's arena is
// limited with tbb::global_control, and each count must reproduce the single-threaded result
// exactly (STYLE.md: "fixed tiles and reduction order give the same result for any thread
// count").

#include <cblas.h>
#include <tbb/global_control.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/attention.h"
#include "gpu/host/kernels/cast.h"
#include "gpu/host/kernels/cross_entropy.h"
#include "gpu/host/kernels/embedding.h"
#include "gpu/host/kernels/gelu.h"
#include "gpu/host/kernels/layer_norm.h"
#include "gpu/host/kernels/matmul.h"
#include "gpu/host/kernels/residual.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

// Big enough that every kernel splits into several tasks (the logits product has 3 x 4 tiles).
constexpr std::int64_t batch = 2;
constexpr std::int64_t seq_len = 80;  // two causal blocks of 64 query rows
constexpr std::int64_t channels = 96;
constexpr std::int64_t heads = 4;
constexpr std::int64_t vocab = 1001;
constexpr std::int64_t vocab_padded = 1024;
constexpr std::int64_t rows = batch * seq_len;

using Tensors = std::vector<std::vector<float>>;

std::vector<float> values(std::size_t n, std::uint64_t seed) {
  return testing::to_float(testing::random_values(n, seed));
}

// Inputs, activations and gradients of one pass through every kernel, in the order a GPT block
// uses them. Every member is compared bit for bit between runs.
struct Pass {
  std::vector<std::int32_t> tokens = testing::random_tokens(rows, vocab, 1);
  std::vector<std::int32_t> targets = testing::random_tokens(rows, vocab, 2);
  std::vector<float> wte = values(vocab_padded * channels, 3);
  std::vector<float> wpe = values(seq_len * channels, 4);
  std::vector<float> ln_weight = values(channels, 5), ln_bias = values(channels, 6);
  std::vector<float> qkv_weight = values(3 * channels * channels, 7);
  std::vector<float> qkv_bias = values(3 * channels, 8);
  // Forward.
  std::vector<float> x = zeros(rows * channels), ln = zeros(rows * channels);
  std::vector<float> mean = zeros(rows), rstd = zeros(rows), qkv = zeros(rows * 3 * channels);
  std::vector<float> att_out = zeros(rows * channels);
  std::vector<float> att = zeros(batch * heads * seq_len * seq_len);
  std::vector<float> act = zeros(rows * channels), residual = zeros(rows * channels);
  std::vector<float> logits = zeros(rows * vocab_padded);
  std::vector<float> losses = zeros(rows), lse = zeros(rows), loss_mean = zeros(1);
  // Backward.
  std::vector<float> dlogits = zeros(rows * vocab_padded), dresidual = zeros(rows * channels);
  std::vector<float> dwte = zeros(vocab_padded * channels), dwpe = zeros(seq_len * channels);
  std::vector<float> dx = zeros(rows * channels), dact = zeros(rows * channels);
  std::vector<float> datt_out = zeros(rows * channels), dqkv = zeros(rows * 3 * channels);
  std::vector<float> dln = zeros(rows * channels), dqkv_weight = zeros(3 * channels * channels);
  std::vector<float> dqkv_bias = zeros(3 * channels);
  std::vector<float> dln_weight = zeros(channels), dln_bias = zeros(channels);
  // Casts: dwte through bf16 and fp16 and back.
  std::vector<float> bf16_round_trip = zeros(vocab_padded * channels);
  std::vector<float> fp16_round_trip = zeros(vocab_padded * channels);

  static std::vector<float> zeros(std::int64_t n) {
    return std::vector<float>(static_cast<std::size_t>(n), 0.0F);
  }

  Tensors outputs() const {
    return {
        x,         ln,          mean,      rstd,       qkv,      att_out,         att,
        act,       residual,    logits,    losses,     lse,      loss_mean,       dlogits,
        dresidual, dwte,        dwpe,      dx,         dact,     datt_out,        dqkv,
        dln,       dqkv_weight, dqkv_bias, dln_weight, dln_bias, bf16_round_trip, fp16_round_trip};
  }
};

void run_forward(Pass& p) {
  embedding_forward(p.x.data(), p.tokens.data(), p.wte.data(), p.wpe.data(), batch, seq_len,
                    channels, vocab_padded);
  layer_norm_forward(p.ln.data(), p.mean.data(), p.rstd.data(), p.x.data(), p.ln_weight.data(),
                     p.ln_bias.data(), rows, channels);
  matmul_forward(p.qkv.data(), p.ln.data(), p.qkv_weight.data(), p.qkv_bias.data(), rows, channels,
                 3 * channels);
  attention_forward(p.att_out.data(), p.att.data(), p.qkv.data(), batch, seq_len, channels, heads);
  gelu_forward(p.act.data(), p.att_out.data(), rows * channels);
  residual_forward(p.residual.data(), p.x.data(), p.act.data(), rows * channels);
  matmul_forward(p.logits.data(), p.residual.data(), p.wte.data(),
                 static_cast<const float*>(nullptr), rows, channels, vocab_padded);
  cross_entropy_forward(p.losses.data(), p.lse.data(), p.loss_mean.data(), p.logits.data(),
                        p.targets.data(), rows, vocab, vocab_padded);
}

void run_backward(Pass& p) {
  const std::vector<float> dlosses(rows, 1.0F / rows);
  cross_entropy_backward(p.dlogits.data(), p.logits.data(), p.lse.data(), p.targets.data(),
                         dlosses.data(), rows, vocab, vocab_padded);
  matmul_backward(p.dresidual.data(), p.dwte.data(), static_cast<float*>(nullptr), p.dlogits.data(),
                  p.residual.data(), p.wte.data(), rows, channels, vocab_padded);
  residual_backward(p.dx.data(), p.dact.data(), p.dresidual.data(), rows * channels);
  gelu_backward(p.datt_out.data(), p.att_out.data(), p.dact.data(), rows * channels);
  attention_backward(p.dqkv.data(), p.datt_out.data(), p.qkv.data(), p.att.data(), batch, seq_len,
                     channels, heads);
  matmul_backward(p.dln.data(), p.dqkv_weight.data(), p.dqkv_bias.data(), p.dqkv.data(),
                  p.ln.data(), p.qkv_weight.data(), rows, channels, 3 * channels);
  layer_norm_backward(p.dx.data(), p.dln_weight.data(), p.dln_bias.data(), p.dln.data(), p.x.data(),
                      p.ln_weight.data(), p.mean.data(), p.rstd.data(), rows, channels);
  embedding_backward(p.dwte.data(), p.dwpe.data(), p.dx.data(), p.tokens.data(), batch, seq_len,
                     channels, vocab_padded);
  const auto n = static_cast<std::int64_t>(p.dwte.size());
  std::vector<std::uint16_t> narrow(p.dwte.size());
  cast_fp32_to_bf16(narrow.data(), p.dwte.data(), n);
  cast_bf16_to_fp32(p.bf16_round_trip.data(), narrow.data(), n);
  cast_fp32_to_fp16(narrow.data(), p.dwte.data(), n);
  cast_fp16_to_fp32(p.fp16_round_trip.data(), narrow.data(), n);
}

Tensors run_every_kernel() {
  Pass pass;
  run_forward(pass);
  run_backward(pass);
  return pass.outputs();
}

void expect_bitwise_equal(const Tensors& actual, const Tensors& expected, const std::string& how) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_EQ(actual[i].size(), expected[i].size());
    EXPECT_EQ(std::memcmp(actual[i].data(), expected[i].data(), actual[i].size() * sizeof(float)),
              0)
        << "tensor " << i << " differs with " << how;
  }
}

Tensors run_with_threads(int tbb_threads) {
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                  static_cast<std::size_t>(tbb_threads));
  return run_every_kernel();
}

TEST(KernelsDeterminism, TwoRunsGiveTheSameBits) {
  const Tensors first = run_every_kernel();
  const Tensors second = run_every_kernel();
  expect_bitwise_equal(second, first, "a second run");
}

TEST(KernelsDeterminism, ThreadCountsGiveTheSameBits) {
  const Tensors single = run_with_threads(1);
  for (const int threads : {2, 3, 4, 8}) {
    expect_bitwise_equal(run_with_threads(threads), single, std::to_string(threads) + " threads");
  }
}

TEST(KernelsDeterminism, MatmulPinsOpenBlasToOneThread) {
  // OpenBLAS's own threading changes the bits with its thread count (measured: 3 and 5 threads
  // differ from 1 and 2), so the matmul kernels pin it to one thread and tile the work themselves.
  openblas_set_num_threads(2);  // as a benchmark or another library might
  run_every_kernel();
  EXPECT_EQ(openblas_get_num_threads(), 1);
}

}  // namespace
}  // namespace strata::gpu::host::kernels
