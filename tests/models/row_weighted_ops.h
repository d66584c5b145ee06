#pragma once

// gpu::Ops that run another backend's ops, except that the loss's gradient is seeded row by row
// from weights the test builds by hand: cross_entropy_backward and cross_entropy_fused run with
// `dlosses` and `targets` replaced by the test's own device buffers. A model driven through them
// gets the gradient of sum over rows of weight[row] x losses[row] for whatever targets the test
// gives, with no row masked: the reference for a masked step that goes through no masking code.
#include <cstdint>
#include <memory>
#include <utility>

#include "gpu/ops.h"

namespace strata::gpu::testing {

class RowWeightedOps final : public gpu::Ops {
 public:
  // `dlosses` and `targets`: device memory of the model's rows, alive while the ops are used.
  RowWeightedOps(std::unique_ptr<gpu::Ops> inner, const float* dlosses, const std::int32_t* targets)
      : owned_(std::move(inner)), inner_(*owned_), dlosses_(dlosses), targets_(targets) {}

  void cross_entropy_backward(gpu::Stream& stream, gpu::Tensor dlogits, gpu::ConstTensor logits,
                              const float* lse, const std::int32_t* /*targets*/,
                              const float* /*dlosses*/, std::int64_t rows, std::int64_t vocab,
                              std::int64_t vocab_padded) override {
    inner_.cross_entropy_backward(stream, dlogits, logits, lse, targets_, dlosses_, rows, vocab,
                                  vocab_padded);
  }
  void cross_entropy_fused(gpu::Stream& stream, gpu::Tensor logits, float* losses, float* lse,
                           float* loss_mean, const std::int32_t* /*targets*/,
                           const float* /*dlosses*/, std::int64_t rows, std::int64_t vocab,
                           std::int64_t vocab_padded) override {
    inner_.cross_entropy_fused(stream, logits, losses, lse, loss_mean, targets_, dlosses_, rows,
                               vocab, vocab_padded);
  }

  // Everything else as the inner ops.
  void set_rows_alone(bool alone) override { inner_.set_rows_alone(alone); }
  void embedding_forward(Stream& stream, Tensor out, const std::int32_t* tokens, ConstTensor wte,
                         ConstTensor wpe, const std::int32_t* start, std::int64_t batch,
                         std::int64_t seq_len, std::int64_t channels, std::int64_t vocab) override {
    inner_.embedding_forward(stream, out, tokens, wte, wpe, start, batch, seq_len, channels, vocab);
  }
  void embedding_backward(Stream& stream, float* dwte, float* dwpe, ConstTensor dout,
                          const std::int32_t* tokens, std::int64_t batch, std::int64_t seq_len,
                          std::int64_t channels, std::int64_t vocab) override {
    inner_.embedding_backward(stream, dwte, dwpe, dout, tokens, batch, seq_len, channels, vocab);
  }
  void layer_norm_forward(Stream& stream, Tensor out, float* mean, float* rstd, ConstTensor inp,
                          ConstTensor weight, ConstTensor bias, std::int64_t rows,
                          std::int64_t channels) override {
    inner_.layer_norm_forward(stream, out, mean, rstd, inp, weight, bias, rows, channels);
  }
  void layer_norm_backward(Stream& stream, Tensor dinp, float* dweight, float* dbias,
                           ConstTensor dout, ConstTensor inp, ConstTensor weight, const float* mean,
                           const float* rstd, std::int64_t rows, std::int64_t channels) override {
    inner_.layer_norm_backward(stream, dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows,
                               channels);
  }
  void residual_layer_norm_forward(Stream& stream, Tensor residual, Tensor out, float* mean,
                                   float* rstd, ConstTensor a, ConstTensor b, ConstTensor weight,
                                   ConstTensor bias, std::int64_t rows,
                                   std::int64_t channels) override {
    inner_.residual_layer_norm_forward(stream, residual, out, mean, rstd, a, b, weight, bias, rows,
                                       channels);
  }
  void matmul_forward(Stream& stream, Tensor out, ConstTensor inp, ConstTensor weight,
                      ConstTensor bias, std::int64_t rows, std::int64_t in_channels,
                      std::int64_t out_channels) override {
    inner_.matmul_forward(stream, out, inp, weight, bias, rows, in_channels, out_channels);
  }
  void matmul_gelu_forward(Stream& stream, Tensor out, Tensor pre, ConstTensor inp,
                           ConstTensor weight, ConstTensor bias, std::int64_t rows,
                           std::int64_t in_channels, std::int64_t out_channels) override {
    inner_.matmul_gelu_forward(stream, out, pre, inp, weight, bias, rows, in_channels,
                               out_channels);
  }
  void matmul_backward(Stream& stream, Tensor dinp, float* dweight, float* dbias, ConstTensor dout,
                       ConstTensor inp, ConstTensor weight, std::int64_t rows,
                       std::int64_t in_channels, std::int64_t out_channels) override {
    inner_.matmul_backward(stream, dinp, dweight, dbias, dout, inp, weight, rows, in_channels,
                           out_channels);
  }
  void attention_forward(Stream& stream, Tensor out, float* lse, ConstTensor qkv,
                         std::int64_t batch, std::int64_t seq_len, std::int64_t heads,
                         std::int64_t kv_heads, std::int64_t head_dim) override {
    inner_.attention_forward(stream, out, lse, qkv, batch, seq_len, heads, kv_heads, head_dim);
  }
  void attention_backward(Stream& stream, Tensor dqkv, ConstTensor dout, ConstTensor qkv,
                          ConstTensor out, const float* lse, std::int64_t batch,
                          std::int64_t seq_len, std::int64_t heads, std::int64_t kv_heads,
                          std::int64_t head_dim) override {
    inner_.attention_backward(stream, dqkv, dout, qkv, out, lse, batch, seq_len, heads, kv_heads,
                              head_dim);
  }
  void gelu_forward(Stream& stream, Tensor out, ConstTensor inp, std::int64_t n) override {
    inner_.gelu_forward(stream, out, inp, n);
  }
  void gelu_backward(Stream& stream, Tensor dinp, ConstTensor inp, ConstTensor dout,
                     std::int64_t n) override {
    inner_.gelu_backward(stream, dinp, inp, dout, n);
  }
  void residual_forward(Stream& stream, Tensor out, ConstTensor a, ConstTensor b,
                        std::int64_t n) override {
    inner_.residual_forward(stream, out, a, b, n);
  }
  void residual_backward(Stream& stream, Tensor da, Tensor db, ConstTensor dout,
                         std::int64_t n) override {
    inner_.residual_backward(stream, da, db, dout, n);
  }
  void cross_entropy_forward(Stream& stream, float* losses, float* lse, float* loss_mean,
                             ConstTensor logits, const std::int32_t* targets, std::int64_t rows,
                             std::int64_t vocab, std::int64_t vocab_padded) override {
    inner_.cross_entropy_forward(stream, losses, lse, loss_mean, logits, targets, rows, vocab,
                                 vocab_padded);
  }
  void rms_norm_forward(Stream& stream, Tensor out, float* rstd, ConstTensor inp,
                        ConstTensor weight, double eps, std::int64_t rows,
                        std::int64_t channels) override {
    inner_.rms_norm_forward(stream, out, rstd, inp, weight, eps, rows, channels);
  }
  void residual_rms_norm_forward(Stream& stream, Tensor residual, Tensor out, float* rstd,
                                 ConstTensor a, ConstTensor b, ConstTensor weight, double eps,
                                 std::int64_t rows, std::int64_t channels) override {
    inner_.residual_rms_norm_forward(stream, residual, out, rstd, a, b, weight, eps, rows,
                                     channels);
  }
  void rms_norm_backward(Stream& stream, Tensor dinp, float* dweight, ConstTensor dout,
                         ConstTensor inp, ConstTensor weight, const float* rstd, std::int64_t rows,
                         std::int64_t channels) override {
    inner_.rms_norm_backward(stream, dinp, dweight, dout, inp, weight, rstd, rows, channels);
  }
  void rope_forward(Stream& stream, Tensor x, const float* inv_freq, const std::int32_t* start,
                    std::int64_t batch, std::int64_t seq_len, std::int64_t heads,
                    std::int64_t head_dim, std::int64_t row_stride) override {
    inner_.rope_forward(stream, x, inv_freq, start, batch, seq_len, heads, head_dim, row_stride);
  }
  void kv_cache_write(Stream& stream, Tensor k_cache, Tensor v_cache, ConstTensor qkv,
                      const std::int32_t* start, std::int64_t batch, std::int64_t tokens,
                      std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                      std::int64_t max_seq) override {
    inner_.kv_cache_write(stream, k_cache, v_cache, qkv, start, batch, tokens, heads, kv_heads,
                          head_dim, max_seq);
  }
  void decode_attention(Stream& stream, Tensor out, ConstTensor qkv, ConstTensor k_cache,
                        ConstTensor v_cache, const std::int32_t* length, float* scratch,
                        std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                        std::int64_t head_dim, std::int64_t max_seq) override {
    inner_.decode_attention(stream, out, qkv, k_cache, v_cache, length, scratch, batch, heads,
                            kv_heads, head_dim, max_seq);
  }
  void rope_backward(Stream& stream, Tensor dx, const float* inv_freq, std::int64_t batch,
                     std::int64_t seq_len, std::int64_t heads, std::int64_t head_dim,
                     std::int64_t row_stride) override {
    inner_.rope_backward(stream, dx, inv_freq, batch, seq_len, heads, head_dim, row_stride);
  }
  void swiglu_forward(Stream& stream, Tensor out, ConstTensor gate, ConstTensor up,
                      std::int64_t n) override {
    inner_.swiglu_forward(stream, out, gate, up, n);
  }
  void swiglu_backward(Stream& stream, Tensor dgate, Tensor dup, ConstTensor dout, ConstTensor gate,
                       ConstTensor up, std::int64_t n) override {
    inner_.swiglu_backward(stream, dgate, dup, dout, gate, up, n);
  }
  void qkv_pack_forward(Stream& stream, Tensor qkv, ConstTensor q, ConstTensor k, ConstTensor v,
                        std::int64_t rows, std::int64_t heads, std::int64_t kv_heads,
                        std::int64_t head_dim) override {
    inner_.qkv_pack_forward(stream, qkv, q, k, v, rows, heads, kv_heads, head_dim);
  }
  void qkv_pack_backward(Stream& stream, Tensor dq, Tensor dk, Tensor dv, ConstTensor dqkv,
                         std::int64_t rows, std::int64_t heads, std::int64_t kv_heads,
                         std::int64_t head_dim) override {
    inner_.qkv_pack_backward(stream, dq, dk, dv, dqkv, rows, heads, kv_heads, head_dim);
  }
  void cast_to_float(Stream& stream, float* target, const void* source, DataType type,
                     std::int64_t n) override {
    inner_.cast_to_float(stream, target, source, type, n);
  }
  void cast_from_float(Stream& stream, void* target, DataType type, const float* source,
                       std::int64_t n) override {
    inner_.cast_from_float(stream, target, type, source, n);
  }
  void fill(Stream& stream, float* target, float value, std::int64_t n) override {
    inner_.fill(stream, target, value, n);
  }
  void accumulate(Stream& stream, float* target, const float* source, float scale,
                  std::int64_t n) override {
    inner_.accumulate(stream, target, source, scale, n);
  }
  void adam_step(Stream& stream, const cpu_adam::AdamConfig& config, std::int64_t step,
                 float grad_scale, const OptimizerArrays& arrays, std::int64_t n) override {
    inner_.adam_step(stream, config, step, grad_scale, arrays, n);
  }
  void adagrad_step(Stream& stream, const cpu_adam::AdagradConfig& config, std::int64_t step,
                    float grad_scale, const OptimizerArrays& arrays, std::int64_t n) override {
    inner_.adagrad_step(stream, config, step, grad_scale, arrays, n);
  }
  void lion_step(Stream& stream, const cpu_adam::LionConfig& config, std::int64_t step,
                 float grad_scale, const OptimizerArrays& arrays, std::int64_t n) override {
    inner_.lion_step(stream, config, step, grad_scale, arrays, n);
  }
  void sum_squares(Stream& stream, double* sum_squares, const float* values,
                   std::int64_t n) override {
    inner_.sum_squares(stream, sum_squares, values, n);
  }

 private:
  std::unique_ptr<gpu::Ops> owned_;
  gpu::Ops& inner_;
  const float* dlosses_;
  const std::int32_t* targets_;
};

}  // namespace strata::gpu::testing
