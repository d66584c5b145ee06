#include "engine/module_pass.h"

#include <utility>

#include "base/timeline.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/param_coordinator.h"

namespace strata::engine {

ModulePass::ModulePass(zero::ParamCoordinator& coordinator, zero::GradReducer& reducer,
                       std::vector<std::string> names, std::vector<std::vector<int>> lenders)
    : coordinator_(coordinator),
      reducer_(reducer),
      names_(std::move(names)),
      lenders_(std::move(lenders)) {
  STRATA_ASSERT(names_.size() == lenders_.size());
}

void ModulePass::forward(const Run& run) {
  for (int m = 0; m < names_.size(); ++m) {
    const base::Timeline::Scope span("host", "forward", names_[m]);
    ModuleCall call;
    call.module = m;
    for (int lender : lenders_[m])
      call.borrowed.emplace_back(coordinator_.acquire(lender));
    call.params = TensorViews(coordinator_.acquire(m));
    run(call);
    coordinator_.release(m);
    for (int lender : lenders_[m])
      coordinator_.release(lender);
  }
}

void ModulePass::backward(bool last_micro, const Run& run, const std::function<void(int)>& done) {
  for (int m = names_.size(); m-- > 0;) {
    const base::Timeline::Scope span("host", "backward", names_[m]);
    ModuleCall call;
    call.module = m;
    for (int lender : lenders_[m]) {
      call.borrowed.emplace_back(coordinator_.acquire(lender));
      call.borrowed_grads.emplace_back(reducer_.grads(lender));
    }
    call.params = TensorViews(coordinator_.acquire(m));
    call.grads = TensorViews(reducer_.grads(m));
    run(call);
    coordinator_.release(m);
    for (int lender : lenders_[m])
      coordinator_.release(lender);
    reducer_.module_done(m, last_micro);
    if (done) done(m);
  }
}

}  // namespace strata::engine
