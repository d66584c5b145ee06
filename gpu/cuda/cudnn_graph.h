#pragma once

#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

// A small layer over cuDNN's backend graph API (cudnn_graph.h), enough to state an operation
// graph of 4-D tensors, pointwise ops, matmuls, reductions and reshapes, and to turn it into an
// execution plan: the jobs cuDNN's C++ frontend does, which is not packaged for this project's
// machines. Every descriptor is owned (Descriptor); any refusal while building throws
// CudnnRefused, which the caller takes as "cuDNN does not take this graph", never as a crash.
namespace strata::gpu::cuda {

// cuDNN refused to build a descriptor, a graph or a plan: `what` names the step, cuDNN's status
// and its last error text.
class CudnnRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  Descriptor& operator=(Descriptor&&) = delete;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return handle_; }

  // Sets `count` values of `type` to `attribute`; throws CudnnRefused naming `what`.
  void set(cudnnBackendAttributeName_t attribute, cudnnBackendAttributeType_t type,
           std::int64_t count, const void* values, const char* what);
  void set_descriptor(cudnnBackendAttributeName_t attribute, const Descriptor& value,
                      const char* what);
  void finalize(const char* what);

 private:
  cudnnBackendDescriptor_t handle_ = nullptr;
};

// Throws CudnnRefused for a status other than success: "<what>: <status> (<cuDNN's last error>)".
void check_cudnn(cudnnStatus_t status, const char* what);

using Dims = std::array<std::int64_t, 4>;

// A tensor of the graph: its unique id, shape and strides in elements, element type.
struct TensorSpec {
  std::int64_t uid = 0;
  Dims dims{};
  Dims strides{};
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
};

// An operation graph being stated, then planned. Tensors are named by uid: the graph's inputs
// and outputs by the caller (below first_virtual_uid), the virtual ones it makes itself.
class GraphBuilder {
 public:
  static constexpr std::int64_t first_virtual_uid = 1000;

  // A tensor the plan reads or writes in memory (16-byte aligned), or, by value, a scalar the
  // variant pack points to on the host.
  void memory_tensor(const TensorSpec& spec);
  void scalar_tensor(std::int64_t uid, cudnnDataType_t type);
  // A virtual tensor (held inside the fused kernel), returned by uid.
  std::int64_t virtual_tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type);
  const TensorSpec& spec(std::int64_t uid) const { return specs_.at(uid); }

  // y = mode(x[, b[, t]]), computed in `math`; for GEN_INDEX, `axis` is the index's axis.
  void pointwise(cudnnPointwiseMode_t mode, std::int64_t x, std::int64_t b, std::int64_t t,
                 std::int64_t y, cudnnDataType_t math = CUDNN_DATA_FLOAT, std::int64_t axis = -1);
  // c = a @ b over the last two dimensions, batched over the first two, in fp32.
  void matmul(std::int64_t a, std::int64_t b, std::int64_t c);
  // y = x reduced by `op` over the dimensions where y's size is 1 (or the head groups).
  void reduction(cudnnReduceTensorOp_t op, std::int64_t x, std::int64_t y);
  // y is x seen with other dimensions and strides (a transpose of its last two).
  void reshape(std::int64_t x, std::int64_t y);

  // The graph finalized and the first engine of heuristic mode A that finalizes a plan for it.
  struct Plan {
    Descriptor plan;
    std::int64_t workspace_bytes = 0;
  };
  Plan plan(cudnnHandle_t handle);

 private:
  void add_tensor(const TensorSpec& spec, bool is_virtual, bool by_value);
  void add_operation(Descriptor operation);

  std::map<std::int64_t, TensorSpec> specs_;
  std::map<std::int64_t, Descriptor> tensors_;
  std::vector<Descriptor> operations_;
  std::vector<Descriptor> attributes_;  // pointwise, matmul and reduction descriptors
  std::int64_t next_virtual_uid_ = first_virtual_uid;
};

// Runs `plan` on `stream`: `uids` and `pointers` pair each memory or scalar tensor with its
// address, `workspace` holds at least the plan's workspace bytes.
void execute_plan(cudnnHandle_t handle, cudaStream_t stream, const Descriptor& plan,
                  const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers,
                  void* workspace);

}  // namespace strata::gpu::cuda
