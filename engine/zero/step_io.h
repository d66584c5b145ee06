#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "engine/optimizer.h"
#include "engine/zero/flat_layout.h"

namespace strata::engine::zero {

// Bytes per element of the parameters in the storage type of `copy`: 2 for bf16 and fp16, 4 for
// none (fp32).
inline std::int64_t param_bytes_per_element(ParamCopy copy) {
  return copy == ParamCopy::none ? 4 : 2;
}

// Where a step's new parameters go, sub-group by sub-group: in the storage type (bf16/fp16 bit
// patterns, or fp32 when the copy type is none), element i of the span being element
// range.begin + i of the partition. The parameter tier is one; so is memory holding a whole
// partition (PartitionMemory). One thread at a time writes ranges (values() to commit()).
class ParamSink {
 public:
  virtual ~ParamSink() = default;
  // Memory for the new values of `range`, valid until commit(range).
  virtual std::span<std::byte> values(Range range) = 0;
  // What was written into values(range) is the parameters of `range` from now on.
  virtual void commit(Range range) = 0;
  // `range` will be committed later, by another thread, while the sink's owner goes on reading
  // parameters (a step whose last sub-groups are stepped beside the next forward): a reader of
  // parameters it covers waits for that commit (ParamTier::wait_committed). Said before that
  // thread starts. Memory that is read only once the step is over needs nothing.
  virtual void expect(Range range) { static_cast<void>(range); }
  // The expected ranges will not be committed (the step failed with `why`, which `fix` fixes):
  // their readers stop waiting and fail with the same.
  virtual void forgo_expected(const std::string& why, const std::string& fix) {
    static_cast<void>(why);
    static_cast<void>(fix);
  }
};

// A ParamSink over memory that holds the whole partition in the storage type.
class PartitionMemory final : public ParamSink {
 public:
  PartitionMemory(std::span<std::byte> partition, std::int64_t element_bytes)
      : partition_(partition), element_bytes_(element_bytes) {}
  std::span<std::byte> values(Range range) override {
    return partition_.subspan(static_cast<std::size_t>(range.begin * element_bytes_),
                              static_cast<std::size_t>(range.size() * element_bytes_));
  }
  void commit(Range) override {}

 private:
  std::span<std::byte> partition_;
  std::int64_t element_bytes_;
};

// Where a step's fp32 gradients come from, sub-group by sub-group: the rank's reduced gradient
// partition in CPU memory, or its swap file (engine/zero/grad_reducer.h). May be called from the
// optimizer's threads (the overlapped step's, LateSubGroups') while the engine's thread reduces
// other modules' gradients or runs the next forward.
class GradSource {
 public:
  virtual ~GradSource() = default;
  // The gradients of `range`: range.size() elements of the gradient type (fp32, or bf16 with
  // bf16.bf16_master_weights_and_grads: StateTypes::grad_bytes), valid until the next call.
  virtual std::span<const std::byte> grads(Range range) = 0;
};

// A GradSource over a whole gradient partition in memory, of `element_bytes` per gradient.
class PartitionGrads final : public GradSource {
 public:
  explicit PartitionGrads(std::span<const float> partition)
      : PartitionGrads(std::as_bytes(partition), sizeof(float)) {}
  PartitionGrads(std::span<const std::byte> partition, std::int64_t element_bytes)
      : partition_(partition), element_bytes_(element_bytes) {}
  std::span<const std::byte> grads(Range range) override {
    return partition_.subspan(static_cast<std::size_t>(range.begin * element_bytes_),
                              static_cast<std::size_t>(range.size() * element_bytes_));
  }

 private:
  std::span<const std::byte> partition_;
  std::int64_t element_bytes_;
};

// What a step reads besides the optimizer states, and where its new parameters go.
struct StepIo {
  GradSource* grads = nullptr;            // the rank's reduced fp32 gradients
  ParamCopy copy_type = ParamCopy::none;  // none: the sink takes fp32 parameters
  ParamSink* params = nullptr;            // null: the new parameters go nowhere (tests)
};

}  // namespace strata::engine::zero
