#include "gpu/host/kernels/embedding.h"

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {

template <typename Real>
void embedding_forward(Real* out, const std::int32_t* tokens, const Real* wte, const Real* wpe,
                       std::int64_t batch, std::int64_t seq_len, std::int64_t channels,
                       std::int64_t vocab, const std::int32_t* start) {
  STRATA_ASSERT(batch >= 0 && seq_len >= 0 && channels >= 0);
  STRATA_ASSERT(out != nullptr && tokens != nullptr && wte != nullptr);
  const std::int64_t rows = batch * seq_len;
  detail::parallel_chunks(rows, detail::grain_for(channels),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t row = begin; row < end; ++row) {
                              const std::int64_t token = tokens[row];
                              STRATA_ASSERT(token >= 0 && token < vocab);
                              const Real* token_row = wte + token * channels;
                              Real* out_row = out + row * channels;
                              if (wpe == nullptr) {
                                for (std::int64_t c = 0; c < channels; ++c)
                                  out_row[c] = token_row[c];
                                continue;
                              }
                              const std::int64_t position =
                                  row % seq_len + (start != nullptr ? start[row / seq_len] : 0);
                              const Real* position_row = wpe + position * channels;
                              for (std::int64_t c = 0; c < channels; ++c)
                                out_row[c] = token_row[c] + position_row[c];
                            }
                          });
}

template <typename Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const std::int32_t* tokens,
                        std::int64_t batch, std::int64_t seq_len, std::int64_t channels,
                        std::int64_t vocab) {
  STRATA_ASSERT(batch >= 0 && seq_len >= 0 && channels >= 0);
  STRATA_ASSERT(dwte != nullptr && dout != nullptr && tokens != nullptr);
  const std::int64_t rows = batch * seq_len;
  for (std::int64_t row = 0; row < rows; ++row) {
    STRATA_ASSERT(tokens[row] >= 0 && tokens[row] < vocab);
  }
  // Two tokens may share a wte row, so rows cannot be split across tasks; channel slices can.
  // Each task walks every (b, t) in order for its slice.
  constexpr std::int64_t slice = 64;
  const std::int64_t slices = (channels + slice - 1) / slice;
  detail::parallel_chunks(
      slices, detail::grain_for(rows * slice), [&](std::int64_t begin, std::int64_t end) {
        const std::int64_t c_begin = begin * slice;
        const std::int64_t c_end = end * slice < channels ? end * slice : channels;
        for (std::int64_t row = 0; row < rows; ++row) {
          const Real* dout_row = dout + row * channels;
          Real* dwte_row = dwte + static_cast<std::int64_t>(tokens[row]) * channels;
          for (std::int64_t c = c_begin; c < c_end; ++c)
            dwte_row[c] += dout_row[c];
        }
      });
  // Position t collects batch rows, in order of b.
  if (dwpe == nullptr) return;
  detail::parallel_chunks(seq_len, detail::grain_for(batch * channels),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t t = begin; t < end; ++t) {
                              Real* dwpe_row = dwpe + t * channels;
                              for (std::int64_t b = 0; b < batch; ++b) {
                                const Real* dout_row = dout + (b * seq_len + t) * channels;
                                for (std::int64_t c = 0; c < channels; ++c)
                                  dwpe_row[c] += dout_row[c];
                              }
                            }
                          });
}

template void embedding_forward<float>(float*, const std::int32_t*, const float*, const float*,
                                       std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                       const std::int32_t*);
template void embedding_forward<double>(double*, const std::int32_t*, const double*, const double*,
                                        std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                        const std::int32_t*);
template void embedding_backward<float>(float*, float*, const float*, const std::int32_t*,
                                        std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template void embedding_backward<double>(double*, double*, const double*, const std::int32_t*,
                                         std::int64_t, std::int64_t, std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels
