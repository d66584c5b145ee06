#pragma once

namespace strata::gpu::cuda {

// Runs a one-block kernel on the current device that writes a known pattern, copies it back and
// checks it. True when the GPU really executes code for this build's architectures.
bool run_probe_kernel() noexcept;

}  // namespace strata::gpu::cuda
