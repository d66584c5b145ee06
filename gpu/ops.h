#pragma once

#include <cstdint>
#include <memory>

#include "cpu_adam/optimizer.h"
#include "gpu/comm.h"  // DataType
#include "gpu/device.h"
#include "gpu/stream.h"
#include "gpu/tensor.h"

namespace strata::gpu {

// One slice of a flat optimizer partition in device memory, for the optimizer steps below: fp32
// master parameters, fp32 gradients and fp32 moments (exp_avg null for Adagrad, exp_avg_sq null
// for Lion), all of the step's length; `param_copy` receives the new parameters rounded to
// nearest even in `copy_type` (bfloat16 or float16), or is null with copy_type float32.
struct OptimizerArrays {
  float* params = nullptr;
  const float* grads = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* param_copy = nullptr;
  DataType copy_type = DataType::float32;
};

// The ops a GPT-2 style or Llama-family model needs, forward and backward, on device memory. Every
// op is enqueued on `stream` and returns at once, as a kernel launch does; pointers must stay
// valid until it has run.
//
// Weights and activations are Tensors: float32, or bfloat16/float16 (the compute type a config's
// "bf16"/"fp16" section names), one type for all the Tensors of one call. A 16-bit op computes in
// fp32 inside: it widens what it reads (exactly), computes as the fp32 op does and rounds what it
// writes once, to nearest even; a product accumulates in fp32 (on CUDA the tensor cores'). The
// float* arguments are fp32 whatever the compute type: the statistics norms save (mean, rstd), the
// loss and its per-row terms (losses, lse, dlosses), RoPE's frequencies, and the parameter
// gradients (dweight, dbias, dwte, dwpe), which accumulate across micro-batches in fp32.
//
// The math, the saved tensors and the conventions are those of gpu/host/kernels/*.h (the host
// backend runs exactly those functions, through that widen-compute-round for 16-bit Tensors):
// backward ops ACCUMULATE into gradient outputs, except cross_entropy_backward, which overwrites.
// Each backend supplies the same ops: the host backend in gpu/host/host_ops.cpp, CUDA in
// gpu/cuda/, one file per op family.
// Which implementation ran, where an op has more than one: counts since the Ops were made, so a
// test can pin the path it means to test and a run can say which one it took. The host backend
// has one path per op and counts nothing.
struct AttentionPathCounts {
  std::int64_t cudnn = 0;        // cuDNN's fused attention
  std::int64_t tensor_core = 0;  // strata's tensor-core kernels (16-bit, head_dim 64 and 128)
  std::int64_t cuda_core = 0;    // strata's warp-per-row kernels, fp32 throughout
};
struct OpsPathCounts {
  AttentionPathCounts attention_forward;
  AttentionPathCounts attention_backward;
  std::int64_t matmul_epilogue = 0;  // bias or GELU added in cuBLASLt's epilogue
  std::int64_t matmul_unfused = 0;   // bias or GELU wanted, added by a kernel after the product
};

// The positions of one block of decode_attention's split on CUDA, and the scratch its partial sums
// take: for each sequence, query head and block, a maximum, a sum and head_dim accumulated values.
inline constexpr std::int64_t kDecodeSplit = 256;
inline std::int64_t decode_attention_scratch(std::int64_t batch, std::int64_t heads,
                                             std::int64_t head_dim, std::int64_t max_seq) {
  return batch * heads * ((max_seq + kDecodeSplit - 1) / kDecodeSplit) * (head_dim + 2);
}

class Ops {
 public:
  virtual ~Ops() = default;
  Ops(const Ops&) = delete;
  Ops& operator=(const Ops&) = delete;

  // Whether the forward ops enqueued from now on compute each row alone: a row of a product or
  // of attention then has the bits it has in a pass of one row, whatever rows come with it and
  // whatever the sequence's or the KV cache's length, so a decode step's logits are a full
  // forward's to the bit (models/generate/). The host's products
  // (OpenBLAS) round a row of many unlike the row alone, and the mode costs their speed: only
  // generation's passes ask for it. cuBLAS and cuDNN promise no such thing, and the CUDA ops
  // ignore it.
  virtual void set_rows_alone(bool alone) { static_cast<void>(alone); }

  // Token t of sequence b is at position start[b] + t (`start`: `batch` int32 of device memory,
  // where a decode step's sequences stand; nullptr: every sequence starts at 0, as in training);
  // wpe, when not null, holds every position's row.
  virtual void embedding_forward(Stream& stream, Tensor out, const std::int32_t* tokens,
                                 ConstTensor wte, ConstTensor wpe, const std::int32_t* start,
                                 std::int64_t batch, std::int64_t seq_len, std::int64_t channels,
                                 std::int64_t vocab) = 0;
  virtual void embedding_backward(Stream& stream, float* dwte, float* dwpe, ConstTensor dout,
                                  const std::int32_t* tokens, std::int64_t batch,
                                  std::int64_t seq_len, std::int64_t channels,
                                  std::int64_t vocab) = 0;

  virtual void layer_norm_forward(Stream& stream, Tensor out, float* mean, float* rstd,
                                  ConstTensor inp, ConstTensor weight, ConstTensor bias,
                                  std::int64_t rows, std::int64_t channels) = 0;
  virtual void layer_norm_backward(Stream& stream, Tensor dinp, float* dweight, float* dbias,
                                   ConstTensor dout, ConstTensor inp, ConstTensor weight,
                                   const float* mean, const float* rstd, std::int64_t rows,
                                   std::int64_t channels) = 0;

  // residual_forward(residual, a, b) then layer_norm_forward(out, ..., residual, ...) as one op:
  // the norm reads the sum while it is in registers instead of reading `residual` back. The bits
  // are the two ops' (the norm reads the sum as rounded into `residual`).
  virtual void residual_layer_norm_forward(Stream& stream, Tensor residual, Tensor out, float* mean,
                                           float* rstd, ConstTensor a, ConstTensor b,
                                           ConstTensor weight, ConstTensor bias, std::int64_t rows,
                                           std::int64_t channels) = 0;

  // out[rows, out] = inp[rows, in] @ weight[out, in]^T + bias (bias may be null). The backward
  // adds dout @ weight into dinp and dout^T @ inp into dweight (fp32), and column sums of dout
  // into dbias (fp32, may be null).
  virtual void matmul_forward(Stream& stream, Tensor out, ConstTensor inp, ConstTensor weight,
                              ConstTensor bias, std::int64_t rows, std::int64_t in_channels,
                              std::int64_t out_channels) = 0;
  // matmul_forward then gelu_forward as one op: `pre` receives the product plus bias (what
  // gelu_backward reads), `out` its GELU, computed from the fp32 sum before `pre` is rounded. On
  // CUDA the GELU runs in the product's epilogue, so the product is not read back.
  virtual void matmul_gelu_forward(Stream& stream, Tensor out, Tensor pre, ConstTensor inp,
                                   ConstTensor weight, ConstTensor bias, std::int64_t rows,
                                   std::int64_t in_channels, std::int64_t out_channels) = 0;
  virtual void matmul_backward(Stream& stream, Tensor dinp, float* dweight, float* dbias,
                               ConstTensor dout, ConstTensor inp, ConstTensor weight,
                               std::int64_t rows, std::int64_t in_channels,
                               std::int64_t out_channels) = 0;

  // Causal self-attention without the T x T matrix (FlashAttention-2's algorithm). `heads` query
  // heads attend over `kv_heads` key/value heads (grouped-query attention: query head h reads kv
  // head h / (heads / kv_heads)), each of `head_dim`, read in place from the rows of `qkv`:
  // [q (heads x head_dim) | k (kv_heads x head_dim) | v (kv_heads x head_dim)] per token. `out`
  // is (rows, heads x head_dim). The forward saves only `lse`, (batch, heads, seq_len) in fp32:
  // each query row's log-sum-exp of its scaled scores. The backward recomputes the probabilities
  // from it and from the forward's `out`, and adds the gradients into dqkv.
  virtual void attention_forward(Stream& stream, Tensor out, float* lse, ConstTensor qkv,
                                 std::int64_t batch, std::int64_t seq_len, std::int64_t heads,
                                 std::int64_t kv_heads, std::int64_t head_dim) = 0;
  virtual void attention_backward(Stream& stream, Tensor dqkv, ConstTensor dout, ConstTensor qkv,
                                  ConstTensor out, const float* lse, std::int64_t batch,
                                  std::int64_t seq_len, std::int64_t heads, std::int64_t kv_heads,
                                  std::int64_t head_dim) = 0;

  // Decoding with a KV cache. A layer's cache holds the keys and the values of `batch` sequences,
  // k_cache and v_cache each [batch, kv_heads, max_seq, head_dim] in the compute type: a kv head's
  // positions lie back to back, and the query heads that share it read it in place (k and v are
  // never repeated per query head).
  //
  // kv_cache_write: the k and v of `tokens` positions per sequence, read from qkv's rows
  // (batch x tokens rows in attention_forward's layout), go to positions [start[b], start[b] +
  // tokens) of sequence b (`start`: `batch` int32 of device memory).
  virtual void kv_cache_write(Stream& stream, Tensor k_cache, Tensor v_cache, ConstTensor qkv,
                              const std::int32_t* start, std::int64_t batch, std::int64_t tokens,
                              std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                              std::int64_t max_seq) = 0;
  // decode_attention: each sequence's one new query (row b of qkv, attention_forward's layout)
  // attends over positions [0, length[b]) of its cache, its own k and v written there first.
  // out is (batch, heads x head_dim), attention_forward's row for that position up to rounding:
  // the keys in its blocks of 64 under the same online softmax on the host; on CUDA split along
  // the cache into
  // blocks of kDecodeSplit positions (flash-decoding: a batch of one still fills the GPU) whose
  // partial sums a second pass combines in `scratch`, decode_attention_scratch floats of device
  // memory.
  virtual void decode_attention(Stream& stream, Tensor out, ConstTensor qkv, ConstTensor k_cache,
                                ConstTensor v_cache, const std::int32_t* length, float* scratch,
                                std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                                std::int64_t head_dim, std::int64_t max_seq) = 0;

  virtual void gelu_forward(Stream& stream, Tensor out, ConstTensor inp, std::int64_t n) = 0;
  virtual void gelu_backward(Stream& stream, Tensor dinp, ConstTensor inp, ConstTensor dout,
                             std::int64_t n) = 0;

  virtual void residual_forward(Stream& stream, Tensor out, ConstTensor a, ConstTensor b,
                                std::int64_t n) = 0;
  virtual void residual_backward(Stream& stream, Tensor da, Tensor db, ConstTensor dout,
                                 std::int64_t n) = 0;

  // Mean loss into *loss_mean (one float of device memory). A negative target (the data path
  // writes -1 on positions that are not in the loss, a prompt's) masks its row: its losses[row]
  // is 0, its gradient row is 0 in every column whatever dlosses[row] holds, its logits are never
  // indexed by the target, and *loss_mean is the mean over the rows whose target is >= 0 (0 when
  // there are none). With no target masked every result has the bits it had before masks.
  virtual void cross_entropy_forward(Stream& stream, float* losses, float* lse, float* loss_mean,
                                     ConstTensor logits, const std::int32_t* targets,
                                     std::int64_t rows, std::int64_t vocab,
                                     std::int64_t vocab_padded) = 0;
  virtual void cross_entropy_backward(Stream& stream, Tensor dlogits, ConstTensor logits,
                                      const float* lse, const std::int32_t* targets,
                                      const float* dlosses, std::int64_t rows, std::int64_t vocab,
                                      std::int64_t vocab_padded) = 0;

  // The loss and its gradient in one op, llm.c's fused_classifier: cross_entropy_forward (losses,
  // lse, *loss_mean), then cross_entropy_backward written over `logits` itself, which holds the
  // gradient afterwards (0 over the padded columns and over a masked row). The step's largest
  // tensor is then never stored twice: the model keeps no separate dlogits.
  virtual void cross_entropy_fused(Stream& stream, Tensor logits, float* losses, float* lse,
                                   float* loss_mean, const std::int32_t* targets,
                                   const float* dlosses, std::int64_t rows, std::int64_t vocab,
                                   std::int64_t vocab_padded) = 0;

  // The Llama family (gpu/host/kernels/{rms_norm,rope,swiglu,qkv_pack}.h). rope_* rotate in
  // place (forward) and apply the transpose in place to a gradient (backward, which overwrites);
  // `inv_freq` is device memory of head_dim / 2 floats.
  virtual void rms_norm_forward(Stream& stream, Tensor out, float* rstd, ConstTensor inp,
                                ConstTensor weight, double eps, std::int64_t rows,
                                std::int64_t channels) = 0;
  // residual_forward then rms_norm_forward as one op, as residual_layer_norm_forward.
  virtual void residual_rms_norm_forward(Stream& stream, Tensor residual, Tensor out, float* rstd,
                                         ConstTensor a, ConstTensor b, ConstTensor weight,
                                         double eps, std::int64_t rows, std::int64_t channels) = 0;
  virtual void rms_norm_backward(Stream& stream, Tensor dinp, float* dweight, ConstTensor dout,
                                 ConstTensor inp, ConstTensor weight, const float* rstd,
                                 std::int64_t rows, std::int64_t channels) = 0;
  // rope_forward's `start` places each sequence's tokens as embedding_forward's does.
  virtual void rope_forward(Stream& stream, Tensor x, const float* inv_freq,
                            const std::int32_t* start, std::int64_t batch, std::int64_t seq_len,
                            std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride) = 0;
  virtual void rope_backward(Stream& stream, Tensor dx, const float* inv_freq, std::int64_t batch,
                             std::int64_t seq_len, std::int64_t heads, std::int64_t head_dim,
                             std::int64_t row_stride) = 0;
  virtual void swiglu_forward(Stream& stream, Tensor out, ConstTensor gate, ConstTensor up,
                              std::int64_t n) = 0;
  virtual void swiglu_backward(Stream& stream, Tensor dgate, Tensor dup, ConstTensor dout,
                               ConstTensor gate, ConstTensor up, std::int64_t n) = 0;
  // qkv rows = [q (heads x head_dim) | k (kv_heads x head_dim) | v (kv_heads x head_dim)], the
  // layout attention_* read, k and v not repeated over the query heads that share them; the
  // backward adds each part of dqkv's rows into dq, dk and dv.
  virtual void qkv_pack_forward(Stream& stream, Tensor qkv, ConstTensor q, ConstTensor k,
                                ConstTensor v, std::int64_t rows, std::int64_t heads,
                                std::int64_t kv_heads, std::int64_t head_dim) = 0;
  virtual void qkv_pack_backward(Stream& stream, Tensor dq, Tensor dk, Tensor dv, ConstTensor dqkv,
                                 std::int64_t rows, std::int64_t heads, std::int64_t kv_heads,
                                 std::int64_t head_dim) = 0;

  // target[i] = float(source[i]) for `n` elements stored as `type` (float32, bfloat16, float16).
  virtual void cast_to_float(Stream& stream, float* target, const void* source, DataType type,
                             std::int64_t n) = 0;
  // target[i] = source[i] rounded to nearest even in `type` (NaN stays NaN).
  virtual void cast_from_float(Stream& stream, void* target, DataType type, const float* source,
                               std::int64_t n) = 0;
  // target[i] = value for `n` floats (seeds dlosses = 1 / rows).
  virtual void fill(Stream& stream, float* target, float value, std::int64_t n) = 0;
  // target[i] += source[i] * scale (gradient accumulation across micro-batches); the product is
  // rounded before the sum on every backend (gpu/detail/elementwise.h).
  virtual void accumulate(Stream& stream, float* target, const float* source, float scale,
                          std::int64_t n) = 0;

  // The optimizer on the device: one step (from 1) over n elements of `arrays`, in one pass that
  // reads the master, the moments and the gradient and writes the master, the moments and the
  // parameter copy. The math is cpu_adam's (cpu_adam/optimizer.h, grad_scale multiplying every
  // gradient first). The host backend runs cpu_adam::step itself on the stream; CUDA runs one
  // kernel per call with the same update rules in the GPU's arithmetic, whose bits
  // cpu_adam::gpu_twin_step gives on the CPU (docs/cpu_adam.md states how far they may be from
  // cpu_adam::step's). An out-of-range hyperparameter is a UserError (cpu_adam::validate).
  virtual void adam_step(Stream& stream, const cpu_adam::AdamConfig& config, std::int64_t step,
                         float grad_scale, const OptimizerArrays& arrays, std::int64_t n) = 0;
  virtual void adagrad_step(Stream& stream, const cpu_adam::AdagradConfig& config,
                            std::int64_t step, float grad_scale, const OptimizerArrays& arrays,
                            std::int64_t n) = 0;
  virtual void lion_step(Stream& stream, const cpu_adam::LionConfig& config, std::int64_t step,
                         float grad_scale, const OptimizerArrays& arrays, std::int64_t n) = 0;

  // *sum_squares (one double of device memory) = the sum of values[i]^2 over n fp32 values,
  // accumulated in double in a fixed order, so every run gives the same bits: the gradient norm
  // with no host round trip. It is inf or NaN exactly when some value is (a finite fp32 squares
  // to at most 1.2e77), so it also tells an overflow. The host backend's is
  // cpu_adam::scan_gradients's sum; CUDA's adds in another order.
  virtual void sum_squares(Stream& stream, double* sum_squares, const float* values,
                           std::int64_t n) = 0;

  // The paths taken so far (OpsPathCounts); zeros where the backend has one path per op.
  virtual OpsPathCounts path_counts() const { return {}; }

 protected:
  Ops() = default;
};

// How fp32 products run. With `tf32` (the config's "strata": {"allow_tf32": true}), CUDA's
// fp32 products round their inputs to TF32 on the tensor cores, as PyTorch's
// torch.backends.cuda.matmul.allow_tf32 does; off, they are fp32 throughout and agree with the
// host's to fp32 rounding. 16-bit products are unaffected, and the host backend ignores it.
//
// With `cudnn_attention` (the default), CUDA's attention runs on cuDNN's fused flash attention
// where cuDNN is found and builds a plan for the call (16-bit, 16-byte aligned), and on strata's
// own kernels otherwise; off, always on strata's own (the tests that pin them, and
// bench_attention's comparison). The host backend ignores both.
struct OpsOptions {
  bool tf32 = false;
  bool cudnn_attention = true;
};

// The ops of `device`'s backend. They must not outlive the device.
std::unique_ptr<Ops> create_ops(Device& device, OpsOptions options = {});

}  // namespace strata::gpu
