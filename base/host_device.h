#pragma once

// STRATA_HOST_DEVICE marks a function that both backends compile: the host compiler sees an
// ordinary inline function, nvcc a __host__ __device__ one. It is how an element-wise formula is
// written once for the host and the CUDA kernels (gpu/detail/elementwise.h,
// cpu_adam/detail/update_rules.h), so that the two cannot drift apart.
#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif
