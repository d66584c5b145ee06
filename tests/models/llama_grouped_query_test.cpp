// Grouped-query attention in the Llama family: k and v are stored once per kv head, in the q, k, v
// activations and in the packed [q | k | v] rows attention reads, and the model computes what
// transformers' repeat_kv computes: the same loss and gradients as the multi-head model whose k
// and v projections are those of the grouped one repeated over the query heads that share them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/llama/llama.h"
#include "models/llama/rope_frequencies.h"
#include "tests/models/model_gradient.h"
#include "tests/models/tiny_llama.h"

namespace strata::models {
namespace {

// 12 rows and head_dim 4: every tensor whose size depends on the kv heads (12 rows of 8, 16, 32
// or 48 elements) is a multiple of 64 bytes in fp32 and bf16, so the carver's 64-byte alignment
// adds nothing to the differences compared below.
LlamaShape tiny_llama(std::int64_t n_kv_head) {
  return testing::tiny_llama(n_kv_head, /*tied=*/false, /*biased=*/true);
}

TEST(LlamaGroupedQuery, ActivationsHoldEachKvHeadOnce) {
  const LlamaShape grouped = tiny_llama(2), multi_head = tiny_llama(4);
  const std::int64_t rows = grouped.rows(), q = grouped.n_head * grouped.head_dim();
  const std::int64_t kv = grouped.n_kv_head * grouped.head_dim();
  // Per set of block activations, and once more for the gradients all blocks share: k and v (dk,
  // dv) shrink from rows x q to rows x kv, and the packed qkv (dqkv) from rows x 3q to
  // rows x (q + 2 kv).
  const std::int64_t saved_per_set = 2 * rows * (q - kv) + rows * (3 * q - (q + 2 * kv));
  for (const gpu::DataType type : {gpu::DataType::float32, gpu::DataType::bfloat16}) {
    for (const bool checkpointing : {false, true}) {
      const std::int64_t sets = (checkpointing ? 1 : grouped.n_layer) + 1;
      EXPECT_EQ(Llama(multi_head).activation_bytes(checkpointing, type) -
                    Llama(grouped).activation_bytes(checkpointing, type),
                sets * saved_per_set * gpu::size_bytes(type))
          << gpu::size_bytes(type) << "-byte elements, checkpointing " << checkpointing;
    }
  }
}

float* values(std::vector<gpu::DeviceBuffer>& buffers, const engine::zero::TensorSlot& slot) {
  return buffers[static_cast<std::size_t>(slot.module)].as<float>() + slot.offset;
}

bool is_kv_projection(const std::string& name) {
  return name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos;
}

// Rows of a tensor (`columns` wide): for a k or v projection's weight one per output channel,
// (kv heads x head_dim) of them; for its bias one element each. Every other tensor is one row.
std::int64_t columns_of(const engine::zero::TensorSlot& grouped_slot, const LlamaShape& grouped) {
  if (!is_kv_projection(grouped_slot.name)) return grouped_slot.numel;
  return grouped_slot.numel / (grouped.n_kv_head * grouped.head_dim());
}

// The row of the grouped tensor that row `row` of the repeated one copies (transformers'
// repeat_kv: query head h reads kv head h / group).
std::int64_t grouped_row(const engine::zero::TensorSlot& grouped_slot, std::int64_t row,
                         const LlamaShape& grouped) {
  if (!is_kv_projection(grouped_slot.name)) return row;
  const std::int64_t d = grouped.head_dim(), group = grouped.n_head / grouped.n_kv_head;
  return (row / d) / group * d + row % d;
}

TEST(LlamaGroupedQuery, MatchesTheModelWithKvHeadsRepeated) {
  const LlamaShape shape = tiny_llama(2);
  testing::GradientHarness grouped(std::make_unique<Llama>(shape), 50);
  testing::GradientHarness repeated(std::make_unique<Llama>(tiny_llama(4)), 50);
  const auto grouped_slots = grouped.layout->all_tensors();
  const auto repeated_slots = repeated.layout->all_tensors();
  ASSERT_EQ(grouped_slots.size(), repeated_slots.size());
  // The repeated model's parameters: the grouped model's, k and v rows repeated per query head.
  for (std::size_t i = 0; i < grouped_slots.size(); ++i) {
    const engine::zero::TensorSlot &from = grouped_slots[i], &to = repeated_slots[i];
    ASSERT_EQ(from.name, to.name);
    const std::int64_t columns = columns_of(from, shape);
    for (std::int64_t row = 0; row < to.numel / columns; ++row)
      std::copy_n(values(grouped.params, from) + grouped_row(from, row, shape) * columns, columns,
                  values(repeated.params, to) + row * columns);
  }
  grouped.backward();
  repeated.backward();
  EXPECT_NEAR(grouped.loss(), repeated.loss(), 1e-5 * std::fabs(repeated.loss()));
  // Each kv head's gradient is the sum of its repeats' gradients; every other is the same.
  for (std::size_t i = 0; i < grouped_slots.size(); ++i) {
    const engine::zero::TensorSlot &slot = grouped_slots[i], &repeated_slot = repeated_slots[i];
    const std::int64_t columns = columns_of(slot, shape);
    std::vector<double> expected(static_cast<std::size_t>(slot.numel), 0.0);
    for (std::int64_t row = 0; row < repeated_slot.numel / columns; ++row) {
      for (std::int64_t c = 0; c < columns; ++c)
        expected[static_cast<std::size_t>(grouped_row(slot, row, shape) * columns + c)] +=
            values(repeated.grads, repeated_slot)[row * columns + c];
    }
    double largest = 0;
    for (const double value : expected)
      largest = std::max(largest, std::fabs(value));
    const float* gradient = values(grouped.grads, slot);
    for (std::int64_t e = 0; e < slot.numel; ++e)
      EXPECT_NEAR(gradient[e], expected[static_cast<std::size_t>(e)], 1e-5 * largest + 1e-7)
          << slot.name << "[" << e << "]";
  }
}

}  // namespace
}  // namespace strata::models
