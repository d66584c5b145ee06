#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/by_index.h"
#include "engine/module.h"

namespace strata::engine {

namespace zero {
class GradReducer;
class ParamCoordinator;
}  // namespace zero

// What one module call holds: its own parameters and those of the modules it borrows, acquired
// for the call and released after it; in backward also the gradient buffers they write.
struct ModuleCall {
  int module = 0;
  TensorViews params;
  std::vector<TensorViews> borrowed;
  TensorViews grads;                        // backward: the module's own
  std::vector<TensorViews> borrowed_grads;  // backward: the borrowed modules', in their order
};

// The order a step calls the model's modules in, with what each call holds: llm.c's forward and
// backward loops over ZeRO's gathered modules. Forward runs in module order, backward in reverse.
// For each call the parameter coordinator acquires the module and the modules it borrows (a tied
// head's embedding) and releases them after it; in backward the gradient reducer gives their
// gradient buffers, and once a module's backward is done it reduces what is due. The engine runs
// the model in these calls (engine.cpp); the memory estimate runs the same passes with no model
// on a counting device, and its step's device peak is theirs (memory_estimate.cpp).
class ModulePass {
 public:
  // names[m], lenders[m]: module m's name (for the timeline) and the modules it borrows.
  ModulePass(zero::ParamCoordinator& coordinator, zero::GradReducer& reducer,
             std::vector<std::string> names, std::vector<std::vector<int>> lenders);

  using Run = std::function<void(const ModuleCall&)>;
  // One micro-batch's forward: `run` for each module, in order.
  void forward(const Run& run);
  // One micro-batch's backward: `run` for each module, in reverse; then `done(m)`, when set,
  // once the reducer knows module m's backward is done (`last_micro`: its gradients are final).
  void backward(bool last_micro, const Run& run, const std::function<void(int)>& done = {});

 private:
  zero::ParamCoordinator& coordinator_;
  zero::GradReducer& reducer_;
  base::ByIndex<std::string> names_;
  base::ByIndex<std::vector<int>> lenders_;
};

}  // namespace strata::engine
