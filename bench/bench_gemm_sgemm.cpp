#include "bench/bench_gemm_sgemm.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

namespace strata::tools {
namespace {

std::vector<float> random_floats(std::int64_t count, std::uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& value : values)
    value = uniform(generator);
  return values;
}

// Row-major C[m, n] = op(A) @ op(B) with OpenBLAS choosing its own split over its threads.
void sgemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace

double median_seconds(const std::function<void()>& call, int repeats) {
  call();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    call();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

SgemmTimes time_sgemm(const GemmLayer& layer, int threads, int repeats) {
  const std::int64_t rows = layer.rows, in = layer.in, out = layer.out;
  std::vector<float> inp = random_floats(rows * in, 1);
  std::vector<float> weight = random_floats(out * in, 2);
  std::vector<float> dout = random_floats(rows * out, 4);
  std::vector<float> result(static_cast<std::size_t>(rows * out));
  std::vector<float> dinp(static_cast<std::size_t>(rows * in));
  std::vector<float> dweight(static_cast<std::size_t>(out * in));
  // OpenBLAS's own threading, set on every call: the host device's matmul op pins OpenBLAS to
  // one thread whenever it runs.
  openblas_set_num_threads(threads);
  SgemmTimes times;
  times.forward_s = median_seconds(
      [&] {
        sgemm(false, true, rows, out, in, inp.data(), in, weight.data(), in, 0.0f, result.data(),
              out);
      },
      repeats);
  times.backward_s = median_seconds(
      [&] {
        sgemm(false, false, rows, in, out, dout.data(), out, weight.data(), in, 1.0f, dinp.data(),
              in);
        sgemm(true, false, out, in, rows, dout.data(), out, inp.data(), in, 1.0f, dweight.data(),
              in);
      },
      repeats);
  return times;
}

double square_sgemm_seconds(std::int64_t size, int threads, int repeats) {
  std::vector<float> a = random_floats(size * size, 5);
  std::vector<float> b = random_floats(size * size, 6);
  std::vector<float> c(static_cast<std::size_t>(size * size));
  openblas_set_num_threads(threads);
  return median_seconds(
      [&] {
        sgemm(false, false, size, size, size, a.data(), size, b.data(), size, 0, c.data(), size);
      },
      std::max(3, repeats / 4));
}

}  // namespace strata::tools
