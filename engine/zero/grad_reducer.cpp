#include "engine/zero/grad_reducer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <utility>

#include "aio/errors.h"
#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"
#include "cpu_adam/half.h"
#include "gpu/stream.h"

namespace strata::engine::zero {

namespace {

// A failed transfer of the gradient swap file as the user sees it: the step's gradients are
// lost, the parameters and optimizer states are not. `whose`: "the gradients of h.3".
UserError swap_failure(const std::string& whose, const aio::IoError& error) {
  return UserError(fmt::format("swapping {} failed: {}", whose, error.what()),
                   fix_of(error) + "; then run the step again", 1);
}

}  // namespace

std::int64_t reduce_chunk_elements(std::int64_t shard_numel, std::int64_t bucket_elements,
                                   int world) {
  const std::int64_t per_rank = std::max<std::int64_t>(1, bucket_elements / world);
  if (per_rank >= shard_numel) return shard_numel;
  const std::int64_t pieces = (shard_numel + per_rank - 1) / per_rank;
  return (shard_numel + pieces - 1) / pieces;
}

GradReducer::GradReducer(gpu::Device& device, gpu::Ops& ops, gpu::Comm& comm, gpu::Stream& stream,
                         const FlatLayout& layout, memory::StreamOrderedMemory& memory,
                         std::vector<std::string> module_names, GradReducerOptions options)
    : device_(device),
      ops_(ops),
      comm_(comm),
      stream_(stream),
      layout_(layout),
      memory_(memory),
      names_(std::move(module_names)),
      options_(options),
      buffers_(static_cast<std::size_t>(layout.module_count())) {
  STRATA_ASSERT(options_.bucket_elements > 0);
  const std::int64_t partition = layout.partition_numel();
  STRATA_ASSERT(options_.to_host || !options_.to_nvme);
  if (options_.to_host) {
    std::int64_t largest = 0;
    for (int m = 0; m < layout.module_count(); ++m)
      largest = std::max(largest, layout.module(m).shard_numel);
    // The partition, or with to_nvme two shard buffers (a sum is formed in one while the other's
    // is written); then the staging. All whole 4 KiB blocks: shards are multiples of 2048
    // elements.
    shard_bytes_ = largest * grad_bytes();
    const std::int64_t accumulated =
        options_.to_nvme ? kShardWrites * shard_bytes_ : partition * grad_bytes();
    host_bytes_ = accumulated + largest * 4;
    staging_offset_ = accumulated;
    if (options_.to_nvme) {
      STRATA_ASSERT(options_.store != nullptr && !options_.store->is_open());
      STRATA_ASSERT(options_.pool != nullptr && !options_.pool->is_open());
      STRATA_ASSERT(options_.largest_read > 0);
      store_ = options_.store;
      const std::int64_t bytes = std::max<std::int64_t>(partition * grad_bytes(), 4096);
      extent_ = store_->reserve(std::span<const std::int64_t>(&bytes, 1));
      contributions_.assign(static_cast<std::size_t>(layout.module_count()), 0);
      swap_shelf_ = options_.pool->reserve(
          1, host_bytes_, memory::PinnedPoolOptions{options_.pin_memory, "gradient swap buffer"});
      read_shelf_ =
          options_.pool->reserve(1, options_.largest_read * grad_bytes(),
                                 memory::PinnedPoolOptions{false, "gradient read buffer"});
    } else if (options_.pin_memory) {
      pinned_memory_ = device.allocate_pinned(host_bytes_);
      host_partition_ = pinned_memory_.as<std::byte>();
    } else {
      host_memory_ = aio::AlignedBuffer(host_bytes_);
      host_partition_ = host_memory_.data();
    }
    if (host_partition_ != nullptr)
      staging_ = reinterpret_cast<float*>(host_partition_ + staging_offset_);
  } else {
    device_partition_ = device.allocate(partition * 4, "gradient partition");
  }
  stats_ = device.allocate(sizeof(double), "gradient norm");
  stats_host_ = device.allocate_pinned(sizeof(GradNorm));
  if (keeps_full_buffers()) {
    for (int m = 0; m < layout.module_count(); ++m)
      make(m);
  }
}

GradReducer::~GradReducer() {
  for (Buffer& buffer : buffers_)
    memory_.release(stream_, std::move(buffer.grads));
  if (!store_) return;
  try {
    stream_.synchronize();  // no task of this reducer is left to submit one
    finish_writes(0, layout_.partition_numel());
  } catch (const std::exception& error) {
    // The step that wrote them has failed or been reported already.
    base::logger("engine").debug("gradient writes at shutdown: {}", error.what());
  }
}

void GradReducer::finish_writes(std::int64_t begin, std::int64_t end) {
  const std::lock_guard lock(writes_mutex_);
  std::exception_ptr failure;
  for (ShardWrite& write : writes_) {
    if (!write.ticket || write.end <= begin || end <= write.begin) continue;
    const aio::Ticket ticket = *std::exchange(write.ticket, std::nullopt);
    try {
      store_->wait(ticket);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

std::span<const std::byte> GradReducer::grads(Range range) {
  STRATA_ASSERT(options_.to_host);
  STRATA_ASSERT(range.begin >= 0 && range.end <= layout_.partition_numel());
  const std::int64_t offset = range.begin * grad_bytes();
  const std::int64_t bytes = range.size() * grad_bytes();
  if (!store_) {
    return {host_partition_ + offset, static_cast<std::size_t>(bytes)};
  }
  finish_writes(range.begin, range.end);  // a shard written behind must be on disk first
  // Sub-groups start on multiples of 2048 elements, so every read is whole 4 KiB blocks except
  // perhaps at the partition's end, which the extent pads.
  const std::int64_t blocks = (bytes + 4095) / 4096 * 4096;
  STRATA_ASSERT(read_buffer_ && blocks <= static_cast<std::int64_t>(read_buffer_.bytes().size()));
  store_->wait(store_->submit_read(extent_, offset,
                                   read_buffer_.bytes().first(static_cast<std::size_t>(blocks))));
  nvme_read_bytes_ += blocks;
  return read_buffer_.bytes().first(static_cast<std::size_t>(bytes));
}

void GradReducer::make(int module) {
  const ModuleSlice& slice = layout_.module(module);
  Buffer& buffer = buffers_[static_cast<std::size_t>(module)];
  buffer.grads = memory_.allocate(stream_, slice.padded_numel * 4,
                                  names_[static_cast<std::size_t>(module)] + " gradients");
  stream_.fill_zero(buffer.grads.data(), buffer.grads.bytes());
  buffer.tensors.clear();
  for (const TensorSlot& slot : layout_.tensors(module))
    buffer.tensors.push_back(buffer.grads.as<float>() + slot.offset);
}

void GradReducer::begin_step() {
  if (store_ && !swap_buffer_) {
    // The pool opened after the reducer was made; its buffers are held from now on.
    swap_buffer_ = options_.pool->acquire(swap_shelf_);
    read_buffer_ = options_.pool->acquire(read_shelf_);
    host_partition_ = swap_buffer_.bytes().data();
    staging_ = reinterpret_cast<float*>(host_partition_ + staging_offset_);
  }
  if (store_) {
    // Each shard's first contribution this step overwrites what the file holds (in stream order:
    // the stream tasks own this state).
    stream_.launch([this] {
      // A failed step may have left writes in flight: theirs is the old step's data.
      try {
        finish_writes(0, layout_.partition_numel());
      } catch (const std::exception& error) {
        base::logger("engine").debug("a gradient write of a failed step: {}", error.what());
      }
      std::fill(contributions_.begin(), contributions_.end(), 0);
      swapped_stats_ = {};
    });
  } else if (options_.to_host) {
    std::byte* partition = host_partition_;
    const std::int64_t bytes = layout_.partition_numel() * grad_bytes();
    stream_.launch([partition, bytes] {
      std::memset(partition, 0, static_cast<std::size_t>(bytes));  // +0 in fp32 and bf16
    });
  } else {
    stream_.fill_zero(device_partition_.data(), device_partition_.bytes());
  }
  if (keeps_full_buffers()) {
    for (Buffer& buffer : buffers_)
      stream_.fill_zero(buffer.grads.data(), buffer.grads.bytes());
  }
}

std::span<const gpu::Tensor> GradReducer::grads(int module) {
  Buffer& buffer = buffers_[static_cast<std::size_t>(module)];
  if (!buffer.grads) make(module);
  return buffer.tensors;
}

void GradReducer::module_done(int module, bool last_micro) {
  const ModuleSlice& slice = layout_.module(module);
  Buffer& buffer = buffers_[static_cast<std::size_t>(module)];
  STRATA_ASSERT(buffer.grads);
  if (keeps_full_buffers()) {
    if (!last_micro) return;
    all_reduce(module);
    // Stage 0's layout is unsharded (the partition is the whole module); stage 1 keeps its shard.
    const int rank = layout_.world_size() > 1 ? comm_.rank() : 0;
    add_to_partition(module, buffer.grads.as<float>() + rank * slice.shard_numel, true);
    return;
  }
  if (comm_.world_size() == 1) {
    // One rank: the reduction is the identity and the whole buffer is the shard.
    add_to_partition(module, buffer.grads.as<float>(), last_micro);
    memory_.release(stream_, std::move(buffer.grads));
    buffer.tensors.clear();
    return;
  }
  gpu::DeviceBuffer shard = memory_.allocate(
      stream_, slice.shard_numel * 4, names_[static_cast<std::size_t>(module)] + " gradient shard");
  reduce_scatter(module, shard.as<float>());
  add_to_partition(module, shard.as<float>(), last_micro);
  memory_.release(stream_, std::move(shard));
  memory_.release(stream_, std::move(buffer.grads));
  buffer.tensors.clear();
}

void GradReducer::all_reduce(int module) {
  if (comm_.world_size() == 1) return;
  const ModuleSlice& slice = layout_.module(module);
  float* grads = buffers_[static_cast<std::size_t>(module)].grads.as<float>();
  for (std::int64_t at = 0; at < slice.padded_numel; at += options_.bucket_elements) {
    const std::int64_t count = std::min(options_.bucket_elements, slice.padded_numel - at);
    comm_.all_reduce(stream_, grads + at, count, gpu::DataType::float32, gpu::ReduceOp::avg);
  }
}

// Rank r's shard of a module is block r of its buffer. Within one bucket every rank's block
// contributes the same slice [at, at + count), so a bucket of a large module is first packed
// (count elements of each block, back to back) and reduce-scattered from there.
void GradReducer::reduce_scatter(int module, float* shard) {
  const ModuleSlice& slice = layout_.module(module);
  const int world = comm_.world_size();
  float* grads = buffers_[static_cast<std::size_t>(module)].grads.as<float>();
  const std::int64_t per_rank =
      reduce_chunk_elements(slice.shard_numel, options_.bucket_elements, world);
  if (per_rank >= slice.shard_numel) {
    comm_.reduce_scatter(stream_, grads, shard, slice.shard_numel, gpu::DataType::float32,
                         gpu::ReduceOp::avg);
    return;
  }
  gpu::DeviceBuffer bucket = memory_.allocate(stream_, per_rank * world * 4, "gradient bucket");
  for (std::int64_t at = 0; at < slice.shard_numel; at += per_rank) {
    const std::int64_t count = std::min(per_rank, slice.shard_numel - at);
    for (int r = 0; r < world; ++r) {
      stream_.copy(bucket.as<float>() + r * count, grads + r * slice.shard_numel + at, count * 4,
                   gpu::CopyKind::device_to_device);
    }
    comm_.reduce_scatter(stream_, bucket.data(), shard + at, count, gpu::DataType::float32,
                         gpu::ReduceOp::avg);
  }
  memory_.release(stream_, std::move(bucket));
}

void GradReducer::add_to_partition(int module, const float* source, bool last_micro) {
  const ModuleSlice& slice = layout_.module(module);
  const std::int64_t count = slice.shard_numel;
  if (!options_.to_host) {
    ops_.accumulate(stream_, device_partition_.as<float>() + slice.partition_offset, source, 1.0f,
                    count);
    return;
  }
  // Down to host memory, then added there by the CPU in stream order (the staging buffer is
  // reused only by later work on this same stream).
  float* staging = staging_;
  stream_.copy(staging, source, count * 4, gpu::CopyKind::device_to_host);
  if (store_) {
    stream_.launch([this, module, last_micro] {
      try {
        swap_shard(module, last_micro);
      } catch (const aio::IoError& error) {
        throw swap_failure("the gradients of " + names_[static_cast<std::size_t>(module)], error);
      }
    });
    return;
  }
  std::byte* target = host_partition_ + slice.partition_offset * grad_bytes();
  stream_.launch([this, target, count] { add_staged(target, target, count); });
}

void GradReducer::add_staged(const std::byte* earlier, std::byte* out, std::int64_t count) const {
  const auto n = static_cast<std::size_t>(count);
  const float* staged = staging_;
  if (options_.bf16) {
    const auto* before = reinterpret_cast<const cpu_adam::bf16*>(earlier);
    auto* sum = reinterpret_cast<cpu_adam::bf16*>(out);
    for (std::size_t i = 0; i < n; ++i)
      sum[i] = cpu_adam::to_bf16((before ? cpu_adam::to_float(before[i]) : 0.0f) + staged[i]);
    return;
  }
  const auto* before = reinterpret_cast<const float*>(earlier);
  auto* sum = reinterpret_cast<float*>(out);
  for (std::size_t i = 0; i < n; ++i)
    sum[i] = (before ? before[i] : 0.0f) + staged[i];
}

// The sum is formed exactly as the in-memory partition forms it (0 + first, then + each next),
// so the gradients have the same bits on either tier, signed zeros included. It is made in the
// accumulation buffer, from which it is written.
//
// The write is left in flight (write-behind): the stream goes on to the next module while the
// disk takes this one, whose sum stays in its buffer until the write is waited for, by the next
// sum formed in that buffer, by a read of the range (grads(), a later micro-batch's read-back),
// or at the end of backward (global_stats).
void GradReducer::swap_shard(int module, bool last_micro) {
  const ModuleSlice& slice = layout_.module(module);
  const std::int64_t count = slice.shard_numel;
  const std::int64_t offset = slice.partition_offset * grad_bytes();
  const int slot = next_write_;
  next_write_ = (next_write_ + 1) % kShardWrites;
  const std::span<std::byte> sum(host_partition_ + slot * shard_bytes_,
                                 static_cast<std::size_t>(count * grad_bytes()));
  ShardWrite& write = writes_[static_cast<std::size_t>(slot)];
  try {
    finish_writes(write.begin, write.end);  // the buffer's last sum is on disk
  } catch (const aio::IoError& error) {
    throw swap_failure("the gradients of " + names_[static_cast<std::size_t>(write.module)], error);
  }
  int& contributions = contributions_[static_cast<std::size_t>(module)];
  if (contributions > 0) {
    finish_writes(slice.partition_offset, slice.partition_offset + count);
    store_->wait(store_->submit_read(extent_, offset, sum));
    nvme_read_bytes_ += static_cast<std::int64_t>(sum.size());
  }
  add_staged(contributions > 0 ? sum.data() : nullptr, sum.data(), count);
  ++contributions;
  const aio::Ticket ticket = store_->submit_write(extent_, offset, sum);
  {
    const std::lock_guard lock(writes_mutex_);
    write = ShardWrite{ticket, module, slice.partition_offset, slice.partition_offset + count};
  }
  nvme_write_bytes_ += static_cast<std::int64_t>(sum.size());
  if (!last_micro) return;
  const cpu_adam::GradStats stats = scan(sum.data(), count);
  swapped_stats_.sum_squares += stats.sum_squares;
  swapped_stats_.has_inf_or_nan = swapped_stats_.has_inf_or_nan || stats.has_inf_or_nan;
}

cpu_adam::GradStats GradReducer::scan(const std::byte* grads, std::int64_t count) const {
  const auto n = static_cast<std::size_t>(count);
  if (options_.bf16)
    return cpu_adam::scan_gradients<cpu_adam::bf16>(
        {reinterpret_cast<const cpu_adam::bf16*>(grads), n});
  return cpu_adam::scan_gradients<float>({reinterpret_cast<const float*>(grads), n});
}

// The local sum of squares lands in page-locked host memory (from a kernel on the device
// partition, or from a stream task's scan of host or swapped gradients), then with several ranks
// goes up again as two floats (sum, inf/NaN) for one all-reduce. No host task touches device
// memory, and the host waits once, at the end.
cpu_adam::GradStats GradReducer::global_stats() {
  const std::int64_t n = layout_.partition_numel();
  GradNorm* norm = stats_host_.as<GradNorm>();
  if (!options_.to_host) {
    // On the device: gpu::Ops::sum_squares (cpu_adam's scan on the host backend, a kernel on
    // CUDA); its sum is inf or NaN exactly when a gradient is.
    double* local = stats_.as<double>();
    ops_.sum_squares(stream_, local, device_partition(), n);
    stream_.copy(&norm->local_sum_squares, local, sizeof(double), gpu::CopyKind::device_to_host);
  } else {
    // Swapped gradients were scanned on their way to the file.
    stream_.launch([this, n, norm] {
      cpu_adam::GradStats local;
      if (store_) {
        // Backward's last writes: a step whose writes failed fails here, whatever reads them.
        try {
          finish_writes(0, n);
        } catch (const aio::IoError& error) {
          throw swap_failure("the gradients", error);
        }
        local = swapped_stats_;
      } else {
        local = scan(host_partition_, n);
      }
      norm->local_sum_squares = local.has_inf_or_nan && std::isfinite(local.sum_squares)
                                    ? std::numeric_limits<double>::quiet_NaN()
                                    : local.sum_squares;
    });
  }
  const base::Timeline::Scope waiting("host", "wait", "gradient norm");
  if (layout_.world_size() == 1) {
    stream_.synchronize();
    return GradNorm::stats(norm->local_sum_squares);
  }
  stream_.launch([norm] {
    norm->reduced[0] = static_cast<float>(norm->local_sum_squares);
    norm->reduced[1] = std::isfinite(norm->local_sum_squares) ? 0.0f : 1.0f;
  });
  // The same eight bytes of device memory as the local double, which went down before this.
  float* reduced = stats_.as<float>();
  stream_.copy(reduced, norm->reduced, sizeof(norm->reduced), gpu::CopyKind::host_to_device);
  comm_.all_reduce(stream_, reduced, 2, gpu::DataType::float32, gpu::ReduceOp::sum);
  stream_.copy(norm->reduced, reduced, sizeof(norm->reduced), gpu::CopyKind::device_to_host);
  stream_.synchronize();
  cpu_adam::GradStats global;
  global.sum_squares = norm->reduced[0];
  global.has_inf_or_nan = norm->reduced[1] != 0.0f || !std::isfinite(norm->reduced[0]);
  return global;
}

}  // namespace strata::engine::zero
