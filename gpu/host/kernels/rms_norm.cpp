#include "gpu/host/kernels/rms_norm.h"

#include <cmath>

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {

template <typename Real>
void rms_norm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, double eps,
                      std::int64_t rows, std::int64_t channels) {
  STRATA_ASSERT(rows >= 0 && channels > 0 && eps > 0);
  STRATA_ASSERT(out != nullptr && rstd != nullptr && inp != nullptr && weight != nullptr);
  detail::parallel_chunks(
      rows, detail::grain_for(channels), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t row = begin; row < end; ++row) {
          const Real* x = inp + row * channels;
          double squares = 0;
          for (std::int64_t c = 0; c < channels; ++c)
            squares += static_cast<double>(x[c]) * static_cast<double>(x[c]);
          const double row_rstd = 1.0 / std::sqrt(squares / static_cast<double>(channels) + eps);
          rstd[row] = static_cast<Real>(row_rstd);
          Real* y = out + row * channels;
          for (std::int64_t c = 0; c < channels; ++c)
            y[c] = static_cast<Real>(static_cast<double>(x[c]) * row_rstd) * weight[c];
        }
      });
}

template <typename Real>
void rms_norm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp,
                       const Real* weight, const Real* rstd, std::int64_t rows,
                       std::int64_t channels) {
  STRATA_ASSERT(rows >= 0 && channels > 0);
  STRATA_ASSERT(dinp != nullptr && dweight != nullptr && dout != nullptr && inp != nullptr &&
                weight != nullptr && rstd != nullptr);
  detail::parallel_chunks(rows, detail::grain_for(channels),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t row = begin; row < end; ++row) {
                              const Real* x = inp + row * channels;
                              const Real* dy = dout + row * channels;
                              const double r = rstd[row];
                              double dot = 0;  // sum(g * xhat)
                              for (std::int64_t c = 0; c < channels; ++c)
                                dot += static_cast<double>(dy[c]) * weight[c] * (x[c] * r);
                              const double mean_dot = dot / static_cast<double>(channels);
                              Real* dx = dinp + row * channels;
                              for (std::int64_t c = 0; c < channels; ++c) {
                                const double g = static_cast<double>(dy[c]) * weight[c];
                                dx[c] += static_cast<Real>(r * (g - x[c] * r * mean_dot));
                              }
                            }
                          });
  constexpr std::int64_t slice = 64;
  const std::int64_t slices = (channels + slice - 1) / slice;
  detail::parallel_chunks(slices, 1, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t c_begin = begin * slice;
    const std::int64_t c_end = end * slice < channels ? end * slice : channels;
    for (std::int64_t row = 0; row < rows; ++row) {
      const Real* x = inp + row * channels;
      const Real* dy = dout + row * channels;
      for (std::int64_t c = c_begin; c < c_end; ++c)
        dweight[c] += dy[c] * (x[c] * rstd[row]);
    }
  });
}

template void rms_norm_forward<float>(float*, float*, const float*, const float*, double,
                                      std::int64_t, std::int64_t);
template void rms_norm_forward<double>(double*, double*, const double*, const double*, double,
                                       std::int64_t, std::int64_t);
template void rms_norm_backward<float>(float*, float*, const float*, const float*, const float*,
                                       const float*, std::int64_t, std::int64_t);
template void rms_norm_backward<double>(double*, double*, const double*, const double*,
                                        const double*, const double*, std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels
