// The CPU optimizers' steps for Python: one Adam, Adagrad or Lion step of cpu_adam over arrays the
// caller owns, each given by its address and dtype, all of `numel` elements. strata/optim.py has
// checked the tensors (CPU, contiguous, sizes) and keeps them alive across the call; here the
// dtypes choose the kernel. The GIL is released for the step: other Python threads run on.
#include "python/native/optim.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"
#include "cpu_adam/workers.h"

namespace strata::python {
namespace {

namespace py = pybind11;
using cpu_adam::bf16;
using cpu_adam::fp16;

template <class T>
struct Tag {
  using type = T;
};

// One array: its first element's address and its dtype's name as torch prints it.
struct Array {
  std::uintptr_t address = 0;
  std::string dtype;
};

template <class T>
std::span<T> span_of(const Array& array, std::int64_t numel) {
  return {reinterpret_cast<T*>(array.address), static_cast<std::size_t>(numel)};
}

// Gradients: fp32, bf16 or fp16.
template <class F>
void with_grad_type(const std::string& dtype, F&& f) {
  if (dtype == "float32") return f(Tag<float>{});
  if (dtype == "bfloat16") return f(Tag<bf16>{});
  if (dtype == "float16") return f(Tag<fp16>{});
  throw py::value_error("gradients of dtype " + dtype + ": give float32, bfloat16 or float16");
}

// Masters and moments: fp32 or bf16.
template <class F>
void with_state_type(const std::string& dtype, F&& f) {
  if (dtype == "float32") return f(Tag<float>{});
  if (dtype == "bfloat16") return f(Tag<bf16>{});
  throw py::value_error("optimizer states of dtype " + dtype + ": give float32 or bfloat16");
}

// The 16-bit copy of the new parameters, or none.
template <class F>
void with_copy_type(const std::optional<Array>& copy, F&& f) {
  if (!copy) return f(Tag<cpu_adam::NoCopy>{});
  if (copy->dtype == "bfloat16") return f(Tag<bf16>{});
  if (copy->dtype == "float16") return f(Tag<fp16>{});
  throw py::value_error("a parameter copy of dtype " + copy->dtype + ": give bfloat16 or float16");
}

// The arena of `threads` workers (0: every core), made once per count and kept: any count gives
// the same bits (cpu_adam/optimizer.h), the count only sets the speed.
cpu_adam::Workers& workers(int threads) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<cpu_adam::Workers>> arenas;
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<cpu_adam::Workers>& arena = arenas[threads];
  if (!arena)
    arena = std::make_unique<cpu_adam::Workers>(cpu_adam::WorkersOptions{.threads = threads});
  return *arena;
}

// Calls `step(Tag<G>, Tag<H>, Tag<P>, Tag<S>)` with the types of the arrays.
template <class Step>
void dispatch(const Array& params, const Array& grads, const std::string& states,
              const std::optional<Array>& copy, Step&& step) {
  with_grad_type(grads.dtype, [&](auto g) {
    with_copy_type(copy, [&](auto h) {
      with_state_type(params.dtype,
                      [&](auto p) { with_state_type(states, [&](auto s) { step(g, h, p, s); }); });
    });
  });
}

struct StepArrays {
  std::int64_t numel;
  Array params;
  Array grads;
  std::string states;
  std::optional<Array> copy;
};

template <class H>
std::span<H> copy_span(const std::optional<Array>& copy, std::int64_t numel) {
  if constexpr (std::is_same_v<H, cpu_adam::NoCopy>) {
    return {};
  } else {
    return span_of<H>(*copy, numel);
  }
}

// One step of `config`'s rule over the arrays, its moments at `moments` (Adam: exp_avg and
// exp_avg_sq; Adagrad: the sum; Lion: exp_avg) in the states' dtype.
template <class Config>
void run_step(const StepArrays& a, const std::vector<std::uintptr_t>& moments, const Config& config,
              std::int64_t step, int threads) {
  dispatch(a.params, a.grads, a.states, a.copy, [&](auto g, auto h, auto p, auto s) {
    using G = typename decltype(g)::type;
    using H = typename decltype(h)::type;
    using P = typename decltype(p)::type;
    using S = typename decltype(s)::type;
    const auto moment = [&](std::size_t i) {
      return span_of<S>(Array{moments[i], a.states}, a.numel);
    };
    const std::span<P> params = span_of<P>(a.params, a.numel);
    const std::span<const G> grads = span_of<const G>(a.grads, a.numel);
    workers(threads).run([&] {
      if constexpr (std::is_same_v<Config, cpu_adam::AdamConfig>) {
        cpu_adam::step<G, H, P, S>(config, step, params, grads, moment(0), moment(1),
                                   copy_span<H>(a.copy, a.numel), 1.0f);
      } else {
        cpu_adam::step<G, H, P, S>(config, step, params, grads, moment(0),
                                   copy_span<H>(a.copy, a.numel), 1.0f);
      }
    });
  });
}

StepArrays step_arrays(std::int64_t numel, std::uintptr_t params, const std::string& params_dtype,
                       std::uintptr_t grads, const std::string& grads_dtype,
                       const std::string& states_dtype, std::uintptr_t copy,
                       const std::string& copy_dtype) {
  if (numel < 0) throw py::value_error("numel is negative");
  StepArrays arrays{numel, {params, params_dtype}, {grads, grads_dtype}, states_dtype, {}};
  if (copy != 0) arrays.copy = Array{copy, copy_dtype};
  return arrays;
}

}  // namespace

void add_optimizer_steps(py::module_& module) {
  module.def(
      "adam_step",
      [](std::int64_t numel, std::uintptr_t params, const std::string& params_dtype,
         std::uintptr_t grads, const std::string& grads_dtype, std::uintptr_t exp_avg,
         std::uintptr_t exp_avg_sq, const std::string& states_dtype, std::uintptr_t copy,
         const std::string& copy_dtype, float lr, float beta1, float beta2, float eps,
         float weight_decay, bool bias_correction, bool adamw_mode, std::int64_t step,
         int threads) {
        const cpu_adam::AdamConfig config{lr,           beta1,           beta2,     eps,
                                          weight_decay, bias_correction, adamw_mode};
        cpu_adam::validate(config);
        run_step(step_arrays(numel, params, params_dtype, grads, grads_dtype, states_dtype, copy,
                             copy_dtype),
                 {exp_avg, exp_avg_sq}, config, step, threads);
      },
      py::kw_only(), py::arg("numel"), py::arg("params"), py::arg("params_dtype"), py::arg("grads"),
      py::arg("grads_dtype"), py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("states_dtype"),
      py::arg("copy"), py::arg("copy_dtype"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"),
      py::arg("eps"), py::arg("weight_decay"), py::arg("bias_correction"), py::arg("adamw_mode"),
      py::arg("step"), py::arg("threads"), py::call_guard<py::gil_scoped_release>());
  module.def(
      "adagrad_step",
      [](std::int64_t numel, std::uintptr_t params, const std::string& params_dtype,
         std::uintptr_t grads, const std::string& grads_dtype, std::uintptr_t sum,
         const std::string& states_dtype, std::uintptr_t copy, const std::string& copy_dtype,
         float lr, float eps, float weight_decay, std::int64_t step, int threads) {
        const cpu_adam::AdagradConfig config{lr, eps, weight_decay};
        cpu_adam::validate(config);
        run_step(step_arrays(numel, params, params_dtype, grads, grads_dtype, states_dtype, copy,
                             copy_dtype),
                 {sum}, config, step, threads);
      },
      py::kw_only(), py::arg("numel"), py::arg("params"), py::arg("params_dtype"), py::arg("grads"),
      py::arg("grads_dtype"), py::arg("sum"), py::arg("states_dtype"), py::arg("copy"),
      py::arg("copy_dtype"), py::arg("lr"), py::arg("eps"), py::arg("weight_decay"),
      py::arg("step"), py::arg("threads"), py::call_guard<py::gil_scoped_release>());
  module.def(
      "lion_step",
      [](std::int64_t numel, std::uintptr_t params, const std::string& params_dtype,
         std::uintptr_t grads, const std::string& grads_dtype, std::uintptr_t exp_avg,
         const std::string& states_dtype, std::uintptr_t copy, const std::string& copy_dtype,
         float lr, float beta1, float beta2, float weight_decay, std::int64_t step, int threads) {
        const cpu_adam::LionConfig config{lr, beta1, beta2, weight_decay};
        cpu_adam::validate(config);
        run_step(step_arrays(numel, params, params_dtype, grads, grads_dtype, states_dtype, copy,
                             copy_dtype),
                 {exp_avg}, config, step, threads);
      },
      py::kw_only(), py::arg("numel"), py::arg("params"), py::arg("params_dtype"), py::arg("grads"),
      py::arg("grads_dtype"), py::arg("exp_avg"), py::arg("states_dtype"), py::arg("copy"),
      py::arg("copy_dtype"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"),
      py::arg("weight_decay"), py::arg("step"), py::arg("threads"),
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace strata::python
