#include "gpu/cuda/cudnn_graph.h"

#include <fmt/format.h>

#include <utility>

#include "gpu/cuda/cudnn_library.h"

namespace strata::gpu::cuda {
namespace {

std::string describe(cudnnStatus_t status, const char* what) {
  char last_error[512] = {};
  cudnn().get_last_error_string(last_error, sizeof(last_error));
  return fmt::format("{}: {}{}{}", what, cudnn().get_error_string(status),
                     last_error[0] != '\0' ? ": " : "", last_error);
}

// The attributes that name the cuDNN handle of an operation graph and of an execution plan.
// cuDNN 9 marks them deprecated, yet both are still built with them (as cuDNN's own frontend
// builds them): the device comes from the handle. Named by value, so that the deprecation does
// not fail the build.
constexpr auto operation_graph_handle = static_cast<cudnnBackendAttributeName_t>(800);
constexpr auto execution_plan_handle = static_cast<cudnnBackendAttributeName_t>(400);

}  // namespace

void check_cudnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) throw CudnnRefused(describe(status, what));
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  check_cudnn(cudnn().create_descriptor(type, &handle_), "cudnnBackendCreateDescriptor");
}

Descriptor::~Descriptor() {
  if (handle_ != nullptr) cudnn().destroy_descriptor(handle_);
}

void Descriptor::set(cudnnBackendAttributeName_t attribute, cudnnBackendAttributeType_t type,
                     std::int64_t count, const void* values, const char* what) {
  check_cudnn(cudnn().set_attribute(handle_, attribute, type, count, values), what);
}

void Descriptor::set_descriptor(cudnnBackendAttributeName_t attribute, const Descriptor& value,
                                const char* what) {
  cudnnBackendDescriptor_t handle = value.get();
  set(attribute, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &handle, what);
}

void Descriptor::finalize(const char* what) {
  check_cudnn(cudnn().finalize(handle_), what);
}

void GraphBuilder::add_tensor(const TensorSpec& spec, bool is_virtual, bool by_value) {
  Descriptor tensor(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::int64_t alignment = 16;
  tensor.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &spec.uid, "tensor uid");
  tensor.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &spec.type, "tensor type");
  tensor.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, spec.dims.data(), "tensor dims");
  tensor.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, spec.strides.data(), "tensor strides");
  tensor.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
  tensor.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
  if (by_value) {
    tensor.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
  }
  tensor.finalize("tensor");
  specs_.emplace(spec.uid, spec);
  tensors_.emplace(spec.uid, std::move(tensor));
}

void GraphBuilder::memory_tensor(const TensorSpec& spec) {
  add_tensor(spec, false, false);
}

void GraphBuilder::scalar_tensor(std::int64_t uid, cudnnDataType_t type) {
  add_tensor(TensorSpec{uid, {1, 1, 1, 1}, {1, 1, 1, 1}, type}, false, true);
}

std::int64_t GraphBuilder::virtual_tensor(const Dims& dims, const Dims& strides,
                                          cudnnDataType_t type) {
  const std::int64_t uid = next_virtual_uid_++;
  add_tensor(TensorSpec{uid, dims, strides, type}, true, false);
  return uid;
}

void GraphBuilder::add_operation(Descriptor operation) {
  operation.finalize("operation");
  operations_.push_back(std::move(operation));
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, std::int64_t x, std::int64_t b,
                             std::int64_t t, std::int64_t y, cudnnDataType_t math,
                             std::int64_t axis) {
  Descriptor description(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  description.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  description.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math,
                  "pointwise precision");
  if (axis >= 0) {
    description.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
  }
  description.finalize("pointwise");
  Descriptor operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, description,
                           "pointwise descriptor");
  operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensors_.at(x), "pointwise x");
  if (b >= 0) {
    operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensors_.at(b), "pointwise b");
  }
  if (t >= 0) {
    operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensors_.at(t), "pointwise t");
  }
  operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensors_.at(y), "pointwise y");
  attributes_.push_back(std::move(description));
  add_operation(std::move(operation));
}

void GraphBuilder::matmul(std::int64_t a, std::int64_t b, std::int64_t c) {
  Descriptor description(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  description.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute,
                  "matmul compute type");
  description.finalize("matmul");
  Descriptor operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensors_.at(a), "matmul a");
  operation.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensors_.at(b), "matmul b");
  operation.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensors_.at(c), "matmul c");
  operation.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, description, "matmul descriptor");
  attributes_.push_back(std::move(description));
  add_operation(std::move(operation));
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t op, std::int64_t x, std::int64_t y) {
  Descriptor description(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  description.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op,
                  "reduction operator");
  description.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute,
                  "reduction compute type");
  description.finalize("reduction");
  Descriptor operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensors_.at(x), "reduction x");
  operation.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensors_.at(y), "reduction y");
  operation.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, description,
                           "reduction descriptor");
  attributes_.push_back(std::move(description));
  add_operation(std::move(operation));
}

void GraphBuilder::reshape(std::int64_t x, std::int64_t y) {
  Descriptor operation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensors_.at(x), "reshape x");
  operation.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensors_.at(y), "reshape y");
  add_operation(std::move(operation));
}

GraphBuilder::Plan GraphBuilder::plan(cudnnHandle_t handle) {
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> operations;
  for (const Descriptor& operation : operations_)
    operations.push_back(operation.get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            static_cast<std::int64_t>(operations.size()), operations.data(), "graph operations");
  graph.set(operation_graph_handle, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
  graph.finalize("operation graph");

  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  heuristics.finalize("heuristics");
  std::int64_t count = 0;
  check_cudnn(cudnn().get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
              "heuristics count");
  if (count == 0) throw CudnnRefused("heuristics: no engine takes the graph");
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> config_handles;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    config_handles.push_back(configs.back().get());
  }
  check_cudnn(
      cudnn().get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, config_handles.data()),
      "heuristics results");
  std::string refusals;
  for (std::int64_t i = 0; i < count; ++i) {
    try {
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                          configs[static_cast<std::size_t>(i)], "plan engine config");
      plan.set(execution_plan_handle, CUDNN_TYPE_HANDLE, 1, &handle, "plan handle");
      plan.finalize("execution plan");
      std::int64_t workspace = 0;
      check_cudnn(cudnn().get_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                        CUDNN_TYPE_INT64, 1, nullptr, &workspace),
                  "plan workspace size");
      return Plan{std::move(plan), workspace};
    } catch (const CudnnRefused& refused) {
      refusals +=
          fmt::format("{}engine config {}: {}", refusals.empty() ? "" : "; ", i, refused.what());
    }
  }
  throw CudnnRefused("no engine config of " + std::to_string(count) + " built a plan: " + refusals);
}

void execute_plan(cudnnHandle_t handle, cudaStream_t stream, const Descriptor& plan,
                  const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers,
                  void* workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
           static_cast<std::int64_t>(uids.size()), uids.data(), "variant pack uids");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<std::int64_t>(pointers.size()), pointers.data(), "variant pack pointers");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
           "variant pack workspace");
  pack.finalize("variant pack");
  // A plan that built and then fails to run is an error, not a refusal: work may be half done.
  cudnnStatus_t status = cudnn().set_stream(handle, stream);
  if (status != CUDNN_STATUS_SUCCESS) throw std::runtime_error(describe(status, "cudnnSetStream"));
  status = cudnn().execute(handle, plan.get(), pack.get());
  if (status != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(describe(status, "cudnnBackendExecute"));
  }
}

}  // namespace strata::gpu::cuda
