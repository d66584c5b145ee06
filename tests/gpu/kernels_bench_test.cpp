// Timings of the host kernels at GPT-2 shapes, beside OpenBLAS's own multi-threaded sgemm on the
// same product. Disabled in the normal suite (a test never has a time limit: docs/architecture.md,
// "Tests and measurements"); run with
//   build/release/tests/gpu/strata_gpu_kernels_tests --gtest_also_run_disabled_tests
//       --gtest_filter='*KernelsBench*'
// Shapes can be changed with STRATA_BENCH_{BATCH,SEQ_LEN,CHANNELS,HEADS,VOCAB}.

#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/attention.h"
#include "gpu/host/kernels/cross_entropy.h"
#include "gpu/host/kernels/flash_attention.h"
#include "gpu/host/kernels/gelu.h"
#include "gpu/host/kernels/layer_norm.h"
#include "gpu/host/kernels/matmul.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

std::int64_t env_or(const char* name, std::int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::stoll(value) : fallback;
}

// Best of `repeats` runs after one warm-up, in milliseconds.
template <typename Body>
double best_ms(int repeats, const Body& body) {
  body();
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    best = elapsed.count() < best ? elapsed.count() : best;
  }
  return best;
}

void print_line(const char* op, double ms, double flops) {
  std::printf("%-28s %10.3f ms %10.2f GFLOP/s\n", op, ms, flops / (ms * 1e6));
}

struct BenchShape {
  std::int64_t batch = env_or("STRATA_BENCH_BATCH", 4);
  std::int64_t seq_len = env_or("STRATA_BENCH_SEQ_LEN", 256);
  std::int64_t channels = env_or("STRATA_BENCH_CHANNELS", 768);
  std::int64_t heads = env_or("STRATA_BENCH_HEADS", 12);
  std::int64_t vocab = env_or("STRATA_BENCH_VOCAB", 50257);
  std::int64_t vocab_padded = (vocab + 127) / 128 * 128;
  std::int64_t rows = batch * seq_len;
};

// The MLP's C -> 4C product: OpenBLAS's own sgemm on all hardware threads (the bound), then the
// kernels (single-threaded OpenBLAS in oneTBB tiles).
void bench_matmul(const BenchShape& shape, unsigned threads) {
  const std::int64_t rows = shape.rows, channels = shape.channels;
  const auto inp = testing::to_float(testing::random_values(rows * channels, 1));
  const auto weight = testing::to_float(testing::random_values(4 * channels * channels, 2));
  const auto bias = testing::to_float(testing::random_values(4 * channels, 3));
  std::vector<float> out(rows * 4 * channels);
  const double flops = 2.0 * rows * channels * 4 * channels;
  openblas_set_num_threads(static_cast<int>(threads));
  const double blas_ms = best_ms(5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                static_cast<int>(4 * channels), static_cast<int>(channels), 1.0F, inp.data(),
                static_cast<int>(channels), weight.data(), static_cast<int>(channels), 0.0F,
                out.data(), static_cast<int>(4 * channels));
  });
  openblas_set_num_threads(1);
  print_line("openblas sgemm (bound)", blas_ms, flops);
  print_line("matmul_forward fc",
             best_ms(5,
                     [&] {
                       matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), rows,
                                      channels, 4 * channels);
                     }),
             flops);
  std::vector<float> dinp(rows * channels), dweight(weight.size()), dbias(bias.size());
  print_line("matmul_backward fc",
             best_ms(3,
                     [&] {
                       matmul_backward(dinp.data(), dweight.data(), dbias.data(), out.data(),
                                       inp.data(), weight.data(), rows, channels, 4 * channels);
                     }),
             2.0 * flops);
  print_line("gelu_forward (4C)",
             best_ms(5, [&] { gelu_forward(out.data(), out.data(), rows * 4 * channels); }),
             20.0 * rows * 4 * channels);
}

void bench_attention(const BenchShape& shape) {
  const std::int64_t rows = shape.rows, channels = shape.channels;
  const auto qkv = testing::to_float(testing::random_values(rows * 3 * channels, 4));
  std::vector<float> att(shape.batch * shape.heads * shape.seq_len * shape.seq_len);
  std::vector<float> out(rows * channels), dqkv(qkv.size());
  // Causal: half of the T x T scores, each a head_size dot product, for q.k and att.v.
  const double flops = 2.0 * shape.batch * shape.seq_len * shape.seq_len * channels;
  print_line("attention_forward",
             best_ms(3,
                     [&] {
                       attention_forward(out.data(), att.data(), qkv.data(), shape.batch,
                                         shape.seq_len, channels, shape.heads);
                     }),
             flops);
  print_line("attention_backward",
             best_ms(3,
                     [&] {
                       attention_backward(dqkv.data(), out.data(), qkv.data(), att.data(),
                                          shape.batch, shape.seq_len, channels, shape.heads);
                     }),
             2.0 * flops);
  // The fused kernel on the same qkv (as many kv heads as heads); its backward recomputes the
  // scores, so it does more work than the materialised one for the same useful flops.
  const std::int64_t head_dim = channels / shape.heads;
  std::vector<float> lse(shape.batch * shape.heads * shape.seq_len);
  print_line("flash_attention_forward",
             best_ms(3,
                     [&] {
                       flash_attention_forward(out.data(), lse.data(), qkv.data(), shape.batch,
                                               shape.seq_len, shape.heads, shape.heads, head_dim);
                     }),
             flops);
  print_line("flash_attention_backward",
             best_ms(3,
                     [&] {
                       flash_attention_backward(dqkv.data(), out.data(), qkv.data(), out.data(),
                                                lse.data(), shape.batch, shape.seq_len, shape.heads,
                                                shape.heads, head_dim);
                     }),
             2.0 * flops);
  const auto weight = testing::to_float(testing::random_values(channels, 5));
  std::vector<float> ln(rows * channels), mean(rows), rstd(rows);
  print_line("layer_norm_forward",
             best_ms(5,
                     [&] {
                       layer_norm_forward(ln.data(), mean.data(), rstd.data(), out.data(),
                                          weight.data(), weight.data(), rows, channels);
                     }),
             8.0 * rows * channels);
}

void bench_cross_entropy(const BenchShape& shape) {
  const std::int64_t rows = shape.rows;
  const auto logits = testing::to_float(testing::random_values(rows * shape.vocab_padded, 6));
  const auto targets = testing::random_tokens(rows, static_cast<std::int32_t>(shape.vocab), 7);
  std::vector<float> losses(rows), lse(rows), dlosses(rows, 1.0F / rows), dlogits(logits.size());
  float loss_mean = 0.0F;
  print_line("cross_entropy_forward",
             best_ms(3,
                     [&] {
                       cross_entropy_forward(losses.data(), lse.data(), &loss_mean, logits.data(),
                                             targets.data(), rows, shape.vocab, shape.vocab_padded);
                     }),
             3.0 * rows * shape.vocab);
  print_line("cross_entropy_backward",
             best_ms(3,
                     [&] {
                       cross_entropy_backward(dlogits.data(), logits.data(), lse.data(),
                                              targets.data(), dlosses.data(), rows, shape.vocab,
                                              shape.vocab_padded);
                     }),
             3.0 * rows * shape.vocab);
}

TEST(KernelsBench, DISABLED_GptShapes) {
  const BenchShape shape;
  const unsigned threads = std::thread::hardware_concurrency();
  std::printf(
      "shapes: batch=%lld seq_len=%lld channels=%lld heads=%lld vocab=%lld (padded %lld), "
      "%u hardware threads\n",
      static_cast<long long>(shape.batch), static_cast<long long>(shape.seq_len),
      static_cast<long long>(shape.channels), static_cast<long long>(shape.heads),
      static_cast<long long>(shape.vocab), static_cast<long long>(shape.vocab_padded), threads);
  bench_matmul(shape, threads);
  bench_attention(shape);
  bench_cross_entropy(shape);
}

}  // namespace
}  // namespace strata::gpu::host::kernels
