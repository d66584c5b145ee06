#pragma once

// What the benchmarks of the device's own ops share: their --device and --dtype options, read
// and refused in one place, and the CUDA device opened only where it can run, so that
// `strata bench gemm` and `strata bench attention` accept and refuse the same words.

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/device.h"
#include "gpu/tensor.h"

namespace strata::tools {

// float32, bfloat16 or float16; anything else is a UserError (exit status 2) naming the three.
gpu::DataType parse_bench_dtype(const std::string& name);

// host or cuda; anything else is a UserError (exit status 2) naming the two.
gpu::DeviceKind parse_bench_device(const std::string& name);

// The CUDA device, or a UserError (exit status 2) saying why this build or this machine has none
// (no CUDA backend compiled in, no GPU, a GPU that ran no test kernel) and that --device host
// measures the host backend instead: never the host device in its place, which
// gpu::open_device falls back to. `budget_bytes` 0: the device's default budget.
std::unique_ptr<gpu::Device> open_bench_cuda_device(std::int64_t budget_bytes = 0);

// The device `kind` names: the CUDA device as above, or the host device.
std::unique_ptr<gpu::Device> open_bench_device(gpu::DeviceKind kind, std::int64_t budget_bytes = 0);

}  // namespace strata::tools
