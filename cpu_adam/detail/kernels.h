#pragma once

// The per-ISA kernel tables. Each SIMD translation unit (kernels_avx512.cpp, kernels_avx2.cpp,
// adam_scalar.cpp) fills one table from the same templates (kernel_impl.h); optimizer.cpp picks
// the table of the active ISA and walks the tiles. This header holds plain data only: it is
// included by translation units compiled with AVX-512 flags, and an inline function defined here
// could be merged by the linker with a baseline copy and run on a CPU without AVX-512.

#include <cstdint>

namespace strata::cpu_adam::detail {

// Indexes of the element types in the tables.
enum GradIndex : int { grad_f32 = 0, grad_bf16 = 1, grad_fp16 = 2, grad_count = 3 };
enum CopyIndex : int { copy_none = 0, copy_bf16 = 1, copy_fp16 = 2, copy_count = 3 };
// The master parameters, and separately the moments, are fp32 or bf16 (DeepSpeed's
// bf16.bf16_master_weights_and_grads and bf16_optimizer_states).
enum StateIndex : int { state_f32 = 0, state_bf16 = 1, state_count = 2 };

// Per-call constants, computed once per call in double and rounded to float.
struct AdamArgs {
  float grad_scale;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float bias_correction2;  // 1 / sqrt(1 - beta2^t), or 1
  float step_size;         // -lr / (1 - beta1^t), or -lr
  float weight_decay;
  float decay;           // -lr * weight_decay, for the decoupled (AdamW) decay
  bool l2_decay;         // !adam_w_mode && weight_decay > 0
  bool decoupled_decay;  // adam_w_mode && weight_decay > 0
};

struct AdagradArgs {
  float grad_scale;
  float eps;
  float step_size;  // -lr
  float weight_decay;
  bool l2_decay;  // weight_decay > 0
};

struct LionArgs {
  float grad_scale;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;    // -lr
  float after_decay;  // 1 - lr * weight_decay
  bool decay;         // weight_decay > 0
};

// The arrays of one call; a kernel works on elements [begin, end) of each. Unused ones are null.
// p is fp32 or bf16 as the kernel's master type says, m and v as its moment type.
struct Arrays {
  void* p;
  const void* g;
  void* m;
  void* v;
  void* p_out;
};

struct ScanPartial {
  double sum_squares;
  bool has_inf_or_nan;
};

using AdamKernel = void (*)(const AdamArgs&, const Arrays&, std::int64_t begin, std::int64_t end);
using AdagradKernel = void (*)(const AdagradArgs&, const Arrays&, std::int64_t begin,
                               std::int64_t end);
using LionKernel = void (*)(const LionArgs&, const Arrays&, std::int64_t begin, std::int64_t end);
using MembwKernel = void (*)(const Arrays&, std::int64_t begin, std::int64_t end);
using ScanKernel = ScanPartial (*)(const void* g, std::int64_t begin, std::int64_t end);

// Indexed [master type][moment type][gradient type][copy type].
struct KernelTable {
  AdamKernel adam[state_count][state_count][grad_count][copy_count];
  AdagradKernel adagrad[state_count][state_count][grad_count][copy_count];
  LionKernel lion[state_count][state_count][grad_count][copy_count];
  // [uses m][uses v][master][moments][gradient][copy]
  MembwKernel membw[2][2][state_count][state_count][grad_count][copy_count];
  ScanKernel scan[grad_count];
};

// Defined in the ISA's translation unit; call only when isa_supported() says so.
const KernelTable& scalar_kernels();
// The GPU optimizer's arithmetic on the CPU, one element at a time (fused_lane.h); baseline x86-64.
const KernelTable& fused_lane_kernels();
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();

}  // namespace strata::cpu_adam::detail
