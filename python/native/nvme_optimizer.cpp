// Optimizer states on NVMe for strata.optim (states="nvme"): the engine's own offloaded optimizer
// (engine/zero/optimizer_states.h, optimizer_offload.h) over a partition made of the caller's
// parameter tensors laid end to end. The fp32 masters and moments live in the engine's
// checksummed swap file; a step streams them sub-group by sub-group through the one pinned pool
// and the aio engine, reading ahead and writing behind while cpu_adam steps the sub-group in
// memory. The gradients are read from the tensors' own memory and the new values written into
// the parameters' own memory, through scratch only where a sub-group crosses tensors or a
// gradient is 16-bit. CPU memory holds the pool's buffers and that scratch: O(sub_group_size),
// whatever the model's size.
//
// A failed transfer marks the states inconsistent: that step and every later call raise the
// error naming the file and the offset (OptimizerStates::check), as in the engine.
#include "python/native/nvme_optimizer.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "aio/errors.h"
#include "base/error.h"
#include "cpu_adam/half.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/optimizer.h"
#include "engine/zero/optimizer_offload.h"
#include "engine/zero/optimizer_states.h"
#include "engine/zero/step_io.h"
#include "gpu/open_device.h"
#include "python/native/errors.h"

namespace strata::python {
namespace {

namespace py = pybind11;
using engine::zero::Range;

// The partition: tensor t holds elements [offsets[t], offsets[t + 1]), of `element_bytes` each,
// at the addresses a step is given (a tensor's gradient may move between steps).
struct Segments {
  std::vector<std::int64_t> offsets;  // tensors + 1 entries
  std::int64_t element_bytes = 4;

  // The tensor holding partition element `index`.
  std::size_t tensor_of(std::int64_t index) const {
    return static_cast<std::size_t>(std::upper_bound(offsets.begin(), offsets.end(), index) -
                                    offsets.begin() - 1);
  }
  // Calls piece(tensor, first element within it, first element within range, count) for each
  // tensor `range` covers.
  template <class Piece>
  void for_each(Range range, Piece&& piece) const {
    for (std::int64_t at = range.begin; at < range.end;) {
      const std::size_t t = tensor_of(at);
      const std::int64_t count = std::min(range.end, offsets[t + 1]) - at;
      piece(t, at - offsets[t], at - range.begin, count);
      at += count;
    }
  }
};

float widen(const std::byte* element, std::int64_t bytes, bool bf16) {
  std::uint16_t bits = 0;
  if (bytes == 4) {
    float value = 0;
    std::memcpy(&value, element, 4);
    return value;
  }
  std::memcpy(&bits, element, 2);
  return bf16 ? cpu_adam::to_float(cpu_adam::bf16{bits}) : cpu_adam::to_float(cpu_adam::fp16{bits});
}

// The step's gradients, fp32 as the states' masters are: a tensor's own memory when the range
// lies in one fp32 gradient, else widened or gathered into scratch.
class TensorGrads final : public engine::zero::GradSource {
 public:
  TensorGrads(const Segments& segments, std::vector<std::uintptr_t> addresses, bool bf16,
              std::vector<float>& scratch)
      : segments_(segments), addresses_(std::move(addresses)), bf16_(bf16), scratch_(scratch) {}

  std::span<const std::byte> grads(Range range) override {
    const std::size_t first = segments_.tensor_of(range.begin);
    const auto* base = reinterpret_cast<const std::byte*>(addresses_[first]);
    if (segments_.element_bytes == 4 && range.end <= segments_.offsets[first + 1]) {
      return {base + (range.begin - segments_.offsets[first]) * 4,
              static_cast<std::size_t>(range.size() * 4)};
    }
    segments_.for_each(
        range, [&](std::size_t t, std::int64_t in_tensor, std::int64_t out, std::int64_t count) {
          const auto* source = reinterpret_cast<const std::byte*>(addresses_[t]);
          for (std::int64_t i = 0; i < count; ++i) {
            scratch_[static_cast<std::size_t>(out + i)] = widen(
                source + (in_tensor + i) * segments_.element_bytes, segments_.element_bytes, bf16_);
          }
        });
    return std::as_bytes(std::span(scratch_).first(static_cast<std::size_t>(range.size())));
  }

 private:
  const Segments& segments_;
  std::vector<std::uintptr_t> addresses_;
  bool bf16_;
  std::vector<float>& scratch_;
};

// The new parameters, in the parameters' type: straight into a tensor when the range lies in
// one, else into scratch, scattered at commit.
class TensorParams final : public engine::zero::ParamSink {
 public:
  TensorParams(const Segments& segments, std::vector<std::uintptr_t> addresses,
               std::vector<std::byte>& scratch)
      : segments_(segments), addresses_(std::move(addresses)), scratch_(scratch) {}

  std::span<std::byte> values(Range range) override {
    const std::size_t first = segments_.tensor_of(range.begin);
    const std::int64_t bytes = segments_.element_bytes;
    if (range.end <= segments_.offsets[first + 1]) {
      auto* base = reinterpret_cast<std::byte*>(addresses_[first]);
      return {base + (range.begin - segments_.offsets[first]) * bytes,
              static_cast<std::size_t>(range.size() * bytes)};
    }
    return std::span(scratch_).first(static_cast<std::size_t>(range.size() * bytes));
  }
  void commit(Range range) override {
    const std::size_t first = segments_.tensor_of(range.begin);
    if (range.end <= segments_.offsets[first + 1]) return;  // written in place
    const std::int64_t bytes = segments_.element_bytes;
    segments_.for_each(
        range, [&](std::size_t t, std::int64_t in_tensor, std::int64_t out, std::int64_t count) {
          std::memcpy(reinterpret_cast<std::byte*>(addresses_[t]) + in_tensor * bytes,
                      scratch_.data() + out * bytes, static_cast<std::size_t>(count * bytes));
        });
  }

 private:
  const Segments& segments_;
  std::vector<std::uintptr_t> addresses_;
  std::vector<std::byte>& scratch_;
};

struct NvmeSettings {
  engine::OptimizerConfig optimizer;
  std::vector<std::int64_t> numels;
  std::string dtype;  // the parameters': float32, bfloat16 or float16
  std::string nvme_path;
  std::string job;  // the swap directory's name under nvme_path: one per optimizer
  std::int64_t sub_group_size;
  std::int64_t buffer_count;
  bool pin_memory;
};

engine::zero::OptimizerOffloadOptions offload_options(const NvmeSettings& settings) {
  engine::zero::OptimizerOffloadOptions options;
  options.device = engine::OffloadDevice::nvme;
  options.sub_group_size = settings.sub_group_size;
  options.pipeline_read = true;
  options.pipeline_write = true;
  options.buffer_count = settings.buffer_count;
  options.pin_memory = settings.pin_memory;
  options.nvme.nvme_path = settings.nvme_path;
  options.nvme.job_name = settings.job;
  return options;
}

// Runs `work`, a call that moves the states through the swap file. A failure there is the
// states' (OptimizerStates::fail: the transfer that failed, its file and offset, and that the
// states cannot go on), now and at every later call: the disk's, an OSError in Python.
template <class Work>
void on_disk(Work&& work) {
  try {
    work();
  } catch (const aio::IoError&) {
    throw;  // already the disk's, with its errno and path
  } catch (const UserError& error) {
    throw SystemError{EIO, std::string(error.what()) + "; fix: " + error.fix()};
  }
}

class NvmeOptimizer {
 public:
  explicit NvmeOptimizer(const NvmeSettings& settings)
      : device_(gpu::create_host_device({})),
        optimizer_(settings.optimizer),
        options_(offload_options(settings)),
        pool_(*device_),
        copy_type_(settings.dtype == "bfloat16"  ? engine::ParamCopy::bf16
                   : settings.dtype == "float16" ? engine::ParamCopy::fp16
                                                 : engine::ParamCopy::none) {
    segments_.element_bytes = copy_type_ == engine::ParamCopy::none ? 4 : 2;
    segments_.offsets.push_back(0);
    for (const std::int64_t numel : settings.numels)
      segments_.offsets.push_back(segments_.offsets.back() + numel);
    store_ = std::make_unique<engine::memory::NvmeStore>(options_.nvme);
    options_.pool = &pool_;
    options_.book = &book_;
    options_.store = store_.get();
    states_ = std::make_unique<engine::zero::OptimizerStates>(optimizer_, segments_.offsets.back(),
                                                              options_);
    offload_ = std::make_unique<engine::zero::OptimizerOffload>(optimizer_, *states_, options_);
    pool_.open();
    store_->open(pool_.pinned_arena());
    states_->open();
    const std::int64_t largest = states_->plan().largest_sub_group;
    grad_scratch_.resize(static_cast<std::size_t>(largest));
    param_scratch_.resize(static_cast<std::size_t>(largest * segments_.element_bytes));
  }

  // The masters from the parameters' values (widened), the moments zero: written to the swap
  // file sub-group by sub-group.
  void fill(const std::vector<std::uintptr_t>& params) {
    const bool bf16 = copy_type_ == engine::ParamCopy::bf16;
    on_disk([&] { fill_masters(params, bf16); });
  }
  void fill_masters(const std::vector<std::uintptr_t>& params, bool bf16) {
    states_->fill_states([&](const engine::zero::OptimizerStates::SubGroupStates& group) {
      segments_.for_each(group.range, [&](std::size_t t, std::int64_t in_tensor, std::int64_t out,
                                          std::int64_t count) {
        const auto* source = reinterpret_cast<const std::byte*>(params[t]);
        for (std::int64_t i = 0; i < count; ++i) {
          group.params[static_cast<std::size_t>(out + i)] = widen(
              source + (in_tensor + i) * segments_.element_bytes, segments_.element_bytes, bf16);
        }
      });
      std::ranges::fill(group.exp_avg, 0.0f);
      std::ranges::fill(group.exp_avg_sq, 0.0f);
    });
  }

  // The states as fp32 arrays per tensor, `numel` elements each (an address of 0: not wanted, or
  // for write_states not given: zeros): copied out through the pool's buffers (a state_dict) or
  // in, written to the swap file (a load).
  struct TensorStates {
    std::vector<std::uintptr_t> masters, exp_avg, exp_avg_sq;
  };
  void read_states(const TensorStates& out) {
    on_disk([&] {
      states_->visit_states([&](const engine::zero::OptimizerStates::SubGroupStates& group) {
        copy_out(group.range, group.params, out.masters);
        copy_out(group.range, group.exp_avg, out.exp_avg);
        copy_out(group.range, group.exp_avg_sq, out.exp_avg_sq);
      });
    });
  }
  void write_states(const TensorStates& in) {
    on_disk([&] {
      states_->fill_states([&](const engine::zero::OptimizerStates::SubGroupStates& group) {
        copy_in(group.range, group.params, in.masters);
        copy_in(group.range, group.exp_avg, in.exp_avg);
        copy_in(group.range, group.exp_avg_sq, in.exp_avg_sq);
      });
    });
  }

  void step(const engine::StepHyperparameters& hyper, std::vector<std::uintptr_t> params,
            std::vector<std::uintptr_t> grads) {
    TensorGrads source(segments_, std::move(grads), copy_type_ == engine::ParamCopy::bf16,
                       grad_scratch_);
    TensorParams sink(segments_, std::move(params), param_scratch_);
    on_disk([&] { offload_->step(hyper, engine::zero::StepIo{&source, copy_type_, &sink}); });
  }

  std::int64_t nvme_bytes() const { return states_->nvme_bytes(); }
  std::int64_t buffer_bytes() const {
    return states_->plan().shelf_buffers * states_->plan().shelf_buffer_bytes;
  }

 private:
  void copy_out(Range range, std::span<const float> group,
                const std::vector<std::uintptr_t>& tensors) const {
    if (group.empty() || tensors.empty()) return;
    segments_.for_each(
        range, [&](std::size_t t, std::int64_t in_tensor, std::int64_t at, std::int64_t count) {
          if (tensors[t] == 0) return;
          std::memcpy(reinterpret_cast<float*>(tensors[t]) + in_tensor, group.data() + at,
                      static_cast<std::size_t>(count) * sizeof(float));
        });
  }
  void copy_in(Range range, std::span<float> group,
               const std::vector<std::uintptr_t>& tensors) const {
    if (group.empty()) return;
    segments_.for_each(
        range, [&](std::size_t t, std::int64_t in_tensor, std::int64_t at, std::int64_t count) {
          float* target = group.data() + at;
          if (tensors.empty() || tensors[t] == 0) {
            std::fill_n(target, count, 0.0f);
          } else {
            std::memcpy(target, reinterpret_cast<const float*>(tensors[t]) + in_tensor,
                        static_cast<std::size_t>(count) * sizeof(float));
          }
        });
  }

  std::unique_ptr<gpu::Device> device_;  // the host device: the pool's memory comes from it
  engine::Optimizer optimizer_;
  engine::zero::OptimizerOffloadOptions options_;
  // Declared in the order they depend on each other, so destroyed in reverse: the states and
  // their stepper before the store, the store before the pool whose arena its rings register.
  engine::memory::PinnedPool pool_;
  engine::memory::Residency book_;
  std::unique_ptr<engine::memory::NvmeStore> store_;
  std::unique_ptr<engine::zero::OptimizerStates> states_;
  std::unique_ptr<engine::zero::OptimizerOffload> offload_;
  engine::ParamCopy copy_type_;
  Segments segments_;
  std::vector<float> grad_scratch_;
  std::vector<std::byte> param_scratch_;
};

engine::OptimizerConfig optimizer_config(const std::string& type, double lr,
                                         std::array<double, 2> betas, double eps,
                                         double weight_decay, bool bias_correction,
                                         bool adamw_mode) {
  engine::OptimizerConfig config;
  config.type = type == "adagrad" ? engine::OptimizerType::adagrad
                : type == "lion"  ? engine::OptimizerType::lion
                : adamw_mode      ? engine::OptimizerType::adamw
                                  : engine::OptimizerType::adam;
  config.lr = lr;
  config.betas = betas;
  config.eps = eps;
  config.weight_decay = weight_decay;
  config.bias_correction = bias_correction;
  config.adam_w_mode = adamw_mode;
  return config;
}

}  // namespace

void add_nvme_optimizer(py::module_& module) {
  py::class_<NvmeOptimizer>(module, "NvmeOptimizer")
      .def(py::init([](const std::string& type, double lr, std::array<double, 2> betas, double eps,
                       double weight_decay, bool bias_correction, bool adamw_mode,
                       std::vector<std::int64_t> numels, const std::string& dtype,
                       const std::string& nvme_path, const std::string& job,
                       std::int64_t sub_group_size, std::int64_t buffer_count, bool pin_memory) {
             return std::make_unique<NvmeOptimizer>(NvmeSettings{
                 optimizer_config(type, lr, betas, eps, weight_decay, bias_correction, adamw_mode),
                 std::move(numels), dtype, nvme_path, job, sub_group_size, buffer_count,
                 pin_memory});
           }),
           py::kw_only(), py::arg("type"), py::arg("lr"), py::arg("betas"), py::arg("eps"),
           py::arg("weight_decay"), py::arg("bias_correction"), py::arg("adamw_mode"),
           py::arg("numels"), py::arg("dtype"), py::arg("nvme_path"), py::arg("job"),
           py::arg("sub_group_size"), py::arg("buffer_count"), py::arg("pin_memory"))
      .def("fill", &NvmeOptimizer::fill, py::arg("params"),
           py::call_guard<py::gil_scoped_release>())
      .def(
          "step",
          [](NvmeOptimizer& self, std::int64_t step, double lr, std::array<double, 2> betas,
             std::vector<std::uintptr_t> params, std::vector<std::uintptr_t> grads) {
            engine::StepHyperparameters hyper;
            hyper.step = step;
            hyper.lr = lr;
            hyper.betas = betas;
            self.step(hyper, std::move(params), std::move(grads));
          },
          py::kw_only(), py::arg("step"), py::arg("lr"), py::arg("betas"), py::arg("params"),
          py::arg("grads"), py::call_guard<py::gil_scoped_release>())
      .def(
          "read_states",
          [](NvmeOptimizer& self, std::vector<std::uintptr_t> masters,
             std::vector<std::uintptr_t> exp_avg, std::vector<std::uintptr_t> exp_avg_sq) {
            self.read_states({std::move(masters), std::move(exp_avg), std::move(exp_avg_sq)});
          },
          py::kw_only(), py::arg("masters"), py::arg("exp_avg"), py::arg("exp_avg_sq"),
          py::call_guard<py::gil_scoped_release>())
      .def(
          "write_states",
          [](NvmeOptimizer& self, std::vector<std::uintptr_t> masters,
             std::vector<std::uintptr_t> exp_avg, std::vector<std::uintptr_t> exp_avg_sq) {
            self.write_states({std::move(masters), std::move(exp_avg), std::move(exp_avg_sq)});
          },
          py::kw_only(), py::arg("masters"), py::arg("exp_avg"), py::arg("exp_avg_sq"),
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("nvme_bytes", &NvmeOptimizer::nvme_bytes)
      .def_property_readonly("buffer_bytes", &NvmeOptimizer::buffer_bytes);
}

}  // namespace strata::python
