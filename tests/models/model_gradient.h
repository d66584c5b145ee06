#pragma once

// The whole model's backward against central finite differences of its forward loss, on the host
// device in fp32: catches wiring mistakes between correct kernels (wrong buffer, missing
// accumulation, a tied head's gradient) that per-op tests cannot see.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "engine/model.h"
#include "engine/param_init.h"
#include "engine/zero/flat_layout.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "gpu/stream.h"

namespace strata::models::testing {

// A model's modules run forward and backward by hand on the host device, over parameters laid
// out as the engine lays them out, with tokens and targets below `vocab`.
struct GradientHarness {
  std::unique_ptr<gpu::Device> device = gpu::create_host_device({});
  std::unique_ptr<gpu::Ops> ops = gpu::create_ops(*device);
  std::unique_ptr<engine::Model> owned;  // after the device: its activations go first
  engine::Model& model;
  std::vector<std::vector<engine::ParamSpec>> specs;
  std::unique_ptr<engine::zero::FlatLayout> layout;
  std::vector<gpu::DeviceBuffer> params, grads;
  std::vector<std::vector<gpu::Tensor>> param_ptrs, grad_ptrs;
  std::vector<std::int32_t> tokens, targets;
  // StepContext::row_loss_gradient of the runs (a masked step's seed); unset, the mean's.
  std::optional<float> row_loss_gradient;

  GradientHarness(std::unique_ptr<engine::Model> model_in, std::int32_t vocab)
      : owned(std::move(model_in)), model(*owned) {
    for (auto* module : model.modules())
      specs.push_back(module->parameters());
    layout = std::make_unique<engine::zero::FlatLayout>(specs, 1);
    std::int64_t tensor_index = 0;
    for (int m = 0; m < layout->module_count(); ++m) {
      std::int64_t n = layout->module(m).padded_numel;
      params.push_back(device->allocate(n * 4, "params"));
      grads.push_back(device->allocate(n * 4, "grads"));
      std::fill_n(params.back().as<float>(), n, 0.0f);
      param_ptrs.emplace_back();
      grad_ptrs.emplace_back();
      auto slots = layout->tensors(m);
      for (std::size_t t = 0; t < slots.size(); ++t, ++tensor_index) {
        float* p = params.back().as<float>() + slots[t].offset;
        // Larger than GPT-2's init, and norms away from 1, so every path carries signal.
        engine::ParamSpec spec = specs[static_cast<std::size_t>(m)][t];
        spec.init = engine::ParamInit::normal;
        spec.init_std = 0.3f;
        engine::init_tensor(spec, 11, tensor_index, 0,
                            {p, static_cast<std::size_t>(slots[t].numel)});
        param_ptrs.back().push_back(p);
        grad_ptrs.back().push_back(grads.back().as<float>() + slots[t].offset);
      }
    }
    model.allocate_activations(*device, false, gpu::DataType::float32);
    std::mt19937 rng(5);
    for (std::int64_t i = 0; i < model.tokens_per_micro_batch(); ++i) {
      tokens.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab)));
      targets.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab)));
    }
  }

  std::vector<engine::TensorViews> borrowed(int m, std::vector<std::vector<gpu::Tensor>>& from) {
    std::vector<engine::TensorViews> views;
    for (int lender : model.modules()[static_cast<std::size_t>(m)]->borrowed_modules()) {
      views.emplace_back(from[static_cast<std::size_t>(lender)]);
    }
    return views;
  }

  float loss() {
    gpu::Stream& stream = device->compute_stream();
    engine::StepContext context{*device, stream, *ops, 0, 1.0f, false, row_loss_gradient};
    model.load_batch(stream, tokens, targets);
    for (int m = 0; m < layout->module_count(); ++m) {
      auto lent = borrowed(m, param_ptrs);
      model.modules()[static_cast<std::size_t>(m)]->forward(
          context, engine::TensorViews(param_ptrs[static_cast<std::size_t>(m)]), lent);
    }
    float value = 0;
    stream.copy(&value, model.loss(), 4, gpu::CopyKind::device_to_host);
    stream.synchronize();
    return value;
  }

  void backward() {
    gpu::Stream& stream = device->compute_stream();
    for (auto& g : grads)
      stream.fill_zero(g.data(), g.bytes());
    loss();
    engine::StepContext context{*device, stream, *ops, 0, 1.0f, false, row_loss_gradient};
    for (int m = layout->module_count(); m-- > 0;) {
      auto lent = borrowed(m, param_ptrs);
      auto lent_grads = borrowed(m, grad_ptrs);
      model.modules()[static_cast<std::size_t>(m)]->backward(
          context, engine::TensorViews(param_ptrs[static_cast<std::size_t>(m)]), lent,
          engine::TensorViews(grad_ptrs[static_cast<std::size_t>(m)]), lent_grads);
    }
    stream.synchronize();
  }
};

// For every tensor, the element with the largest gradient and a few random ones against central
// finite differences of the fp32 forward loss.
inline void expect_gradients_match_finite_differences(GradientHarness& h) {
  h.backward();
  std::mt19937 rng(9);
  for (const auto& slot : h.layout->all_tensors()) {
    float* p = h.params[static_cast<std::size_t>(slot.module)].as<float>() + slot.offset;
    const float* g = h.grads[static_cast<std::size_t>(slot.module)].as<float>() + slot.offset;
    std::int64_t largest = 0;
    for (std::int64_t i = 0; i < slot.numel; ++i) {
      if (std::fabs(g[i]) > std::fabs(g[largest])) largest = i;
    }
    std::vector<std::int64_t> picks = {largest};
    for (int k = 0; k < 3; ++k)
      picks.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(slot.numel)));
    for (std::int64_t i : picks) {
      const float h_step = 1e-2f;
      const float saved = p[i];
      p[i] = saved + h_step;
      const double up = h.loss();
      p[i] = saved - h_step;
      const double down = h.loss();
      p[i] = saved;
      const double numeric = (up - down) / (2.0 * h_step);
      // fp32 forward differences are good to about 1e-4 absolute at this loss scale.
      EXPECT_NEAR(g[i], numeric, 2e-3 + 0.05 * std::fabs(numeric)) << slot.name << "[" << i << "]";
    }
  }
}

}  // namespace strata::models::testing
