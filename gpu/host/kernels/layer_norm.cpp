#include "gpu/host/kernels/layer_norm.h"

#include <cmath>

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {

template <typename Real>
void layer_norm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                        const Real* bias, std::int64_t rows, std::int64_t channels) {
  STRATA_ASSERT(rows >= 0 && channels > 0);
  STRATA_ASSERT(out != nullptr && mean != nullptr && rstd != nullptr && inp != nullptr);
  STRATA_ASSERT(weight != nullptr && bias != nullptr);
  detail::parallel_chunks(
      rows, detail::grain_for(4 * channels), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t row = begin; row < end; ++row) {
          const Real* x = inp + row * channels;
          // Two passes in double: a float sum of squares loses digits when |mean| >> std.
          double sum = 0.0;
          for (std::int64_t c = 0; c < channels; ++c)
            sum += x[c];
          const double row_mean = sum / static_cast<double>(channels);
          double squares = 0.0;
          for (std::int64_t c = 0; c < channels; ++c) {
            const double shifted = x[c] - row_mean;
            squares += shifted * shifted;
          }
          const double variance = squares / static_cast<double>(channels);
          const double row_rstd = 1.0 / std::sqrt(variance + layer_norm_epsilon);
          const Real m = static_cast<Real>(row_mean);
          const Real s = static_cast<Real>(row_rstd);
          Real* y = out + row * channels;
          for (std::int64_t c = 0; c < channels; ++c)
            y[c] = (x[c] - m) * s * weight[c] + bias[c];
          mean[row] = m;
          rstd[row] = s;
        }
      });
}

template <typename Real>
void layer_norm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                         const Real* weight, const Real* mean, const Real* rstd, std::int64_t rows,
                         std::int64_t channels) {
  STRATA_ASSERT(rows >= 0 && channels > 0);
  STRATA_ASSERT(dinp != nullptr && dweight != nullptr && dbias != nullptr && dout != nullptr);
  STRATA_ASSERT(inp != nullptr && weight != nullptr && mean != nullptr && rstd != nullptr);
  detail::parallel_chunks(
      rows, detail::grain_for(6 * channels), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t row = begin; row < end; ++row) {
          const Real* x = inp + row * channels;
          const Real* dy = dout + row * channels;
          const Real m = mean[row];
          const Real s = rstd[row];
          double sum_g = 0.0;
          double sum_g_xhat = 0.0;
          for (std::int64_t c = 0; c < channels; ++c) {
            const double g = static_cast<double>(dy[c]) * weight[c];
            sum_g += g;
            sum_g_xhat += g * ((x[c] - m) * s);
          }
          const Real mean_g = static_cast<Real>(sum_g / static_cast<double>(channels));
          const Real mean_g_xhat = static_cast<Real>(sum_g_xhat / static_cast<double>(channels));
          Real* dx = dinp + row * channels;
          for (std::int64_t c = 0; c < channels; ++c) {
            const Real xhat = (x[c] - m) * s;
            dx[c] += s * (dy[c] * weight[c] - mean_g - xhat * mean_g_xhat);
          }
        }
      });
  constexpr std::int64_t slice = 64;
  const std::int64_t slices = (channels + slice - 1) / slice;
  detail::parallel_chunks(
      slices, detail::grain_for(rows * slice), [&](std::int64_t begin, std::int64_t end) {
        const std::int64_t c_begin = begin * slice;
        const std::int64_t c_end = end * slice < channels ? end * slice : channels;
        for (std::int64_t row = 0; row < rows; ++row) {
          const Real* x = inp + row * channels;
          const Real* dy = dout + row * channels;
          const Real m = mean[row];
          const Real s = rstd[row];
          for (std::int64_t c = c_begin; c < c_end; ++c) {
            dweight[c] += dy[c] * ((x[c] - m) * s);
            dbias[c] += dy[c];
          }
        }
      });
}

template void layer_norm_forward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, std::int64_t, std::int64_t);
template void layer_norm_forward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, std::int64_t, std::int64_t);
template void layer_norm_backward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, std::int64_t,
                                         std::int64_t);
template void layer_norm_backward<double>(double*, double*, double*, const double*, const double*,
                                          const double*, const double*, const double*, std::int64_t,
                                          std::int64_t);

}  // namespace strata::gpu::host::kernels
