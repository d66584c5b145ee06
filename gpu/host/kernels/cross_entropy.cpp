#include "gpu/host/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {

template <typename Real>
void cross_entropy_forward(Real* losses, Real* lse, Real* loss_mean, const Real* logits,
                           const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t vocab_padded) {
  STRATA_ASSERT(rows >= 0 && vocab > 0 && vocab <= vocab_padded);
  STRATA_ASSERT(losses != nullptr && lse != nullptr && loss_mean != nullptr);
  STRATA_ASSERT(logits != nullptr && targets != nullptr);
  detail::parallel_chunks(
      rows, detail::grain_for(2 * vocab), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t row = begin; row < end; ++row) {
          const std::int64_t target = targets[row];
          STRATA_ASSERT(target < vocab);
          if (target < 0) {
            lse[row] = 0;
            losses[row] = 0;
            continue;
          }
          const Real* x = logits + row * vocab_padded;
          Real max_logit = x[0];
          for (std::int64_t c = 1; c < vocab; ++c)
            max_logit = x[c] > max_logit ? x[c] : max_logit;
          double sum = 0.0;
          for (std::int64_t c = 0; c < vocab; ++c)
            sum += std::exp(x[c] - max_logit);
          const double row_lse = static_cast<double>(max_logit) + std::log(sum);
          lse[row] = static_cast<Real>(row_lse);
          losses[row] = static_cast<Real>(row_lse - static_cast<double>(x[target]));
        }
      });
  // A masked row's loss is 0 and adds nothing; with none masked, in_loss == rows and the mean has
  // the bits it had before masks existed.
  double total = 0.0;
  std::int64_t in_loss = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    total += losses[row];
    in_loss += targets[row] >= 0 ? 1 : 0;
  }
  *loss_mean = in_loss > 0 ? static_cast<Real>(total / static_cast<double>(in_loss)) : Real{0};
}

template <typename Real>
void cross_entropy_backward(Real* dlogits, const Real* logits, const Real* lse,
                            const std::int32_t* targets, const Real* dlosses, std::int64_t rows,
                            std::int64_t vocab, std::int64_t vocab_padded) {
  STRATA_ASSERT(rows >= 0 && vocab > 0 && vocab <= vocab_padded);
  STRATA_ASSERT(dlogits != nullptr && logits != nullptr && lse != nullptr);
  STRATA_ASSERT(targets != nullptr && dlosses != nullptr);
  detail::parallel_chunks(rows, detail::grain_for(2 * vocab_padded),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t row = begin; row < end; ++row) {
                              const std::int64_t target = targets[row];
                              STRATA_ASSERT(target < vocab);
                              Real* dx = dlogits + row * vocab_padded;
                              if (target < 0) {
                                // Masked: no gradient, and its logits are never read.
                                std::fill_n(dx, vocab_padded, Real{0});
                                continue;
                              }
                              const Real* x = logits + row * vocab_padded;
                              const Real row_lse = lse[row];
                              const Real dloss = dlosses[row];
                              for (std::int64_t c = 0; c < vocab; ++c) {
                                const Real indicator = c == target ? Real{1} : Real{0};
                                dx[c] = (std::exp(x[c] - row_lse) - indicator) * dloss;
                              }
                              for (std::int64_t c = vocab; c < vocab_padded; ++c)
                                dx[c] = 0;
                            }
                          });
}

template void cross_entropy_forward<float>(float*, float*, float*, const float*,
                                           const std::int32_t*, std::int64_t, std::int64_t,
                                           std::int64_t);
template void cross_entropy_forward<double>(double*, double*, double*, const double*,
                                            const std::int32_t*, std::int64_t, std::int64_t,
                                            std::int64_t);
template void cross_entropy_backward<float>(float*, const float*, const float*, const std::int32_t*,
                                            const float*, std::int64_t, std::int64_t, std::int64_t);
template void cross_entropy_backward<double>(double*, const double*, const double*,
                                             const std::int32_t*, const double*, std::int64_t,
                                             std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels
