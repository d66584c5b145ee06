#include "engine/zero/grad_reducer.h"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

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
#include "engine/zero/step_buffers.h"
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

std::int64_t grad_piece_elements(const FlatLayout& layout) {
  std::int64_t largest = 0;
  for (int m = 0; m < layout.module_count(); ++m)
    largest = std::max(largest, layout.module(m).shard_numel);
  return std::min(largest, kGradPieceElements);
}

GradReducer::GradReducer(gpu::Device& device, gpu::Ops& ops, gpu::Comm& comm, gpu::Stream& stream,
                         const FlatLayout& layout, memory::StreamOrderedMemory& memory,
                         std::vector<std::string> module_names, GradReducerOptions options)
    : device_(device),
      ops_(ops),
      comm_(comm),
      stream_(stream),
      copy_stream_(device.d2h_stream()),
      layout_(layout),
      memory_(memory),
      names_(std::move(module_names)),
      options_(options),
      plan_(plan(options, layout)),
      buffers_(layout.module_count()),
      // Room for the pieces of many modules (16 G elements of them at 4 Mi a piece): the engine's
      // thread waits for room only when the CPU is that far behind.
      jobs_("gradients", 4096),
      contributions_(layout.module_count(), 0) {
  STRATA_ASSERT(options_.bucket_elements > 0);
  STRATA_ASSERT(options_.to_host || !options_.to_nvme);
  if (options_.to_host) {
    reserve_host_memory();
  } else {
    device_partition_ = device.allocate(plan_.device_partition_bytes, "gradient partition");
  }
  make_norm_buffers();
  if (keeps_full_buffers()) {
    for (int m = 0; m < layout.module_count(); ++m)
      make(m);
  }
}

// The plan's host memory: one buffer of the pool, page-locked when pin_memory asks, holds the
// partition (with to_nvme two piece sums: one is formed while the other is written) and then the
// staging ring; with to_nvme a second holds what grads(range) reads, and the store the swap file.
// All whole 4 KiB blocks: pieces are multiples of 2048 elements. Reserved before they open.
void GradReducer::reserve_host_memory() {
  STRATA_ASSERT(options_.pool != nullptr && !options_.pool->is_open());
  if (options_.to_nvme) {
    STRATA_ASSERT(options_.store != nullptr && !options_.store->is_open());
    STRATA_ASSERT(options_.largest_read > 0);
    store_ = options_.store;
    extent_ = store_->reserve(std::span<const std::int64_t>(&plan_.swap_bytes, 1));
    host_shelf_ = options_.pool->reserve(
        1, plan_.host_bytes(),
        memory::PinnedPoolOptions{options_.pin_memory, "gradient swap buffer"});
    read_shelf_ = options_.pool->reserve(1, plan_.read_bytes,
                                         memory::PinnedPoolOptions{false, "gradient read buffer"});
  } else {
    STRATA_ASSERT(options_.book != nullptr);
    host_shelf_ = options_.pool->reserve(
        1, plan_.host_bytes(),
        memory::PinnedPoolOptions{options_.pin_memory, "gradient partition in CPU memory", true});
  }
  reduced_ = device_.create_event();
  copies_done_ = device_.create_event();
  // A copy event per piece in flight (64: a few modules' pieces even at 4 Mi a piece); the
  // engine's thread reuses one once the job that waited on it has run.
  for (int e = 0; e < 64; ++e) {
    copied_.push_back(device_.create_event());
    copied_job_.push_back(0);
  }
}

// The gradient norm's way down (global_stats): with to_host the modules' sums taken on the
// device and the tiles' partials the CPU scans, otherwise the modules' sums as they come down.
void GradReducer::make_norm_buffers() {
  stats_ = device_.allocate(plan_.norm_bytes, "gradient norm");
  stats_host_ = device_.allocate_pinned(plan_.pinned_norm_bytes);
  const int modules = layout_.module_count();
  if (!options_.to_host) {
    module_sums_.assign(modules, 0.0);
    return;
  }
  module_norms_ = device_.allocate(plan_.module_norm_bytes, "gradient norms of the modules");
  module_norms_host_ = device_.allocate_pinned(plan_.pinned_module_norm_bytes);
  normed_on_device_.assign(modules, 0);
  std::int64_t tiles = 0;
  module_first_tile_.push_back(tiles);
  for (int m = 0; m < modules; ++m) {
    tiles += cpu_adam::gradient_tile_count(layout_.module(m).shard_numel);
    module_first_tile_.push_back(tiles);
  }
  tile_partials_.resize(static_cast<std::size_t>(tiles));
}

GradReducer::~GradReducer() {
  try {
    jobs_.drain();
  } catch (const std::exception& error) {
    // The step that ran them has failed or been reported already.
    base::logger("engine").debug("gradient jobs at shutdown: {}", error.what());
  }
  for (Buffer& buffer : buffers_)
    memory_.release(stream_, std::move(buffer.grads));
  if (!store_) return;
  try {
    finish_writes(0, layout_.partition_numel());
  } catch (const std::exception& error) {
    base::logger("engine").debug("gradient writes at shutdown: {}", error.what());
  }
}

void GradReducer::finish_writes(std::int64_t begin, std::int64_t end) {
  const std::lock_guard lock(writes_mutex_);
  std::exception_ptr failure;
  for (PieceWrite& write : writes_) {
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
  finish_writes(range.begin, range.end);  // a piece written behind must be on disk first
  // Sub-groups start on multiples of 2048 elements, so every read is whole 4 KiB blocks except
  // perhaps at the partition's end, which the extent pads.
  const std::int64_t blocks = (bytes + 4095) / 4096 * 4096;
  STRATA_ASSERT(read_buffer_ && blocks <= static_cast<std::int64_t>(read_buffer_.bytes().size()));
  store_->wait(store_->submit_read(extent_, offset,
                                   read_buffer_.bytes().first(static_cast<std::size_t>(blocks))));
  optimizer_read_bytes_ += blocks;
  return read_buffer_.bytes().first(static_cast<std::size_t>(bytes));
}

void GradReducer::make(int module) {
  const ModuleSlice& slice = layout_.module(module);
  Buffer& buffer = buffers_[module];
  buffer.grads = memory_.allocate(stream_, slice.padded_numel * 4,
                                  step_buffer_name(StepBuffer::gradients, names_[module]));
  stream_.fill_zero(buffer.grads.data(), buffer.grads.bytes());
  buffer.tensors.clear();
  for (const TensorSlot& slot : layout_.tensors(module))
    buffer.tensors.push_back(buffer.grads.as<float>() + slot.offset);
}

void GradReducer::open() {
  if (!options_.to_host) return;
  STRATA_ASSERT(!host_buffer_ && options_.pool->is_open());
  host_buffer_ = options_.pool->acquire(host_shelf_);
  host_partition_ = host_buffer_.bytes().data();
  staging_ = reinterpret_cast<float*>(host_partition_ + plan_.accumulation_bytes);
  if (store_) {
    read_buffer_ = options_.pool->acquire(read_shelf_);
    return;
  }
  const std::int64_t partition_bytes = layout_.partition_numel() * grad_bytes();
  static_cast<void>(options_.book->add_in_cpu(
      options_.book->add_user("gradients"), "gradient partition",
      host_buffer_.bytes().first(static_cast<std::size_t>(partition_bytes))));
}

void GradReducer::begin_step() {
  STRATA_ASSERT(!options_.to_host || host_buffer_);  // open() came first
  if (options_.to_host) {
    // A failed step may have left jobs queued (skipped after its failure) and writes in flight:
    // theirs is the old step's data, and the failure was reported with that step.
    try {
      jobs_.drain();
    } catch (const std::exception& error) {
      base::logger("engine").debug("a gradient job of a failed step: {}", error.what());
    }
    if (store_) {
      try {
        finish_writes(0, layout_.partition_numel());
      } catch (const std::exception& error) {
        base::logger("engine").debug("a gradient write of a failed step: {}", error.what());
      }
    }
    std::fill(contributions_.begin(), contributions_.end(), 0);
    std::fill(normed_on_device_.begin(), normed_on_device_.end(), 0);
    // The copies of the last step read the buffers zeroed below (stages 0-1): on the device, they
    // come first.
    copy_stream_.record(*copies_done_);
    stream_.wait(*copies_done_);
  } else {
    stream_.fill_zero(device_partition_.data(), device_partition_.bytes());
  }
  if (keeps_full_buffers()) {
    for (Buffer& buffer : buffers_)
      stream_.fill_zero(buffer.grads.data(), buffer.grads.bytes());
  }
}

std::span<const gpu::Tensor> GradReducer::grads(int module) {
  Buffer& buffer = buffers_[module];
  if (!buffer.grads) make(module);
  return buffer.tensors;
}

void GradReducer::module_done(int module, bool last_micro) {
  const ModuleSlice& slice = layout_.module(module);
  Buffer& buffer = buffers_[module];
  STRATA_ASSERT(buffer.grads);
  if (keeps_full_buffers()) {
    if (!last_micro) return;
    all_reduce(module);
    // Stage 0's layout is unsharded (the partition is the whole module); stage 1 keeps its shard.
    const int rank = layout_.world_size() > 1 ? comm_.rank() : 0;
    add_to_partition(module, buffer.grads.as<float>() + rank * slice.shard_numel, true);
    return;
  }
  // A buffer the copies read goes back on the copy stream, after them.
  gpu::Stream& done_with = options_.to_host ? copy_stream_ : stream_;
  if (comm_.world_size() == 1) {
    // One rank: the reduction is the identity and the whole buffer is the shard.
    add_to_partition(module, buffer.grads.as<float>(), last_micro);
    memory_.release(done_with, std::move(buffer.grads));
    buffer.tensors.clear();
    return;
  }
  gpu::DeviceBuffer shard = memory_.allocate(
      stream_, slice.shard_numel * 4, step_buffer_name(StepBuffer::gradient_shard, names_[module]));
  reduce_scatter(module, shard.as<float>());
  add_to_partition(module, shard.as<float>(), last_micro);
  memory_.release(done_with, std::move(shard));
  memory_.release(stream_, std::move(buffer.grads));
  buffer.tensors.clear();
}

void GradReducer::all_reduce(int module) {
  if (comm_.world_size() == 1) return;
  const ModuleSlice& slice = layout_.module(module);
  float* grads = buffers_[module].grads.as<float>();
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
  float* grads = buffers_[module].grads.as<float>();
  const std::int64_t per_rank =
      reduce_chunk_elements(slice.shard_numel, options_.bucket_elements, world);
  if (per_rank >= slice.shard_numel) {
    comm_.reduce_scatter(stream_, grads, shard, slice.shard_numel, gpu::DataType::float32,
                         gpu::ReduceOp::avg);
    return;
  }
  gpu::DeviceBuffer bucket = memory_.allocate(
      stream_, per_rank * world * 4, step_buffer_name(StepBuffer::gradient_bucket, names_[module]));
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
  if (!options_.to_host) {
    ops_.accumulate(stream_, device_partition_.as<float>() + slice.partition_offset, source, 1.0f,
                    slice.shard_numel);
    return;
  }
  land(module, source, last_micro);
}

int GradReducer::next_copy_event() {
  const int e = next_copied_;
  next_copied_ = (next_copied_ + 1) % static_cast<int>(copied_.size());
  jobs_.wait(copied_job_[e]);  // its last piece is added
  return e;
}

void GradReducer::land(int module, const float* source, bool last_micro) {
  const ModuleSlice& slice = layout_.module(module);
  int& contributions = contributions_[module];
  const bool first = contributions == 0;
  ++contributions;
  // Final as it is, in fp32: its norm on the device (a bf16 partition's is of the rounded values).
  const bool normed = first && last_micro && !options_.bf16;
  if (normed) {
    ops_.sum_squares(stream_, module_norms_.as<double>() + module, source, slice.shard_numel);
    normed_on_device_[module] = 1;
  }
  stream_.record(*reduced_);
  copy_stream_.wait(*reduced_);
  // An fp32 partition in CPU memory takes a step's first contribution as it is: no staging, no
  // add, and a scan only of a final piece the device did not sum.
  const bool straight = first && !store_ && !options_.bf16;
  for (std::int64_t at = 0; at < slice.shard_numel; at += plan_.piece_elements) {
    Piece piece;
    piece.module = module;
    piece.first = first;
    piece.last = last_micro;
    piece.normed = normed;
    piece.begin = slice.partition_offset + at;
    piece.count = std::min(plan_.piece_elements, slice.shard_numel - at);
    void* target = host_partition_ + piece.begin * 4;
    if (!straight) {
      piece.slot = next_slot_;
      next_slot_ = (next_slot_ + 1) % kGradStagingSlots;
      const base::Timeline::Scope waiting("host", "wait", "gradient staging");
      jobs_.wait(slot_job_[piece.slot]);  // the CPU is done with it
      target = staging(piece.slot);
    }
    piece.copied = next_copy_event();
    copy_stream_.copy(target, source + at, piece.count * 4, gpu::CopyKind::device_to_host);
    gpu::Event& copied = *copied_[piece.copied];
    copy_stream_.record(copied);
    const CpuQueue::Ticket job = jobs_.submit([this, piece] { land_piece(piece); });
    copied_job_[piece.copied] = job;
    if (piece.slot >= 0) slot_job_[piece.slot] = job;
  }
}

void GradReducer::land_piece(const Piece& piece) {
  const std::string& name = names_[piece.module];
  copied_[piece.copied]->synchronize();
  if (store_) {
    const base::Timeline::Scope span("gradients", "swap", name);
    try {
      swap_piece(piece);
    } catch (const aio::IoError& error) {
      throw swap_failure("the gradients of " + name, error);
    }
    return;
  }
  std::byte* target = host_partition_ + piece.begin * grad_bytes();
  if (piece.slot >= 0) {
    const base::Timeline::Scope span("gradients", "add", name);
    add_staged(piece.first ? nullptr : target, target, staging(piece.slot), piece.count);
  }
  if (!piece.last || piece.normed) return;
  scan_final(piece, target);
}

void GradReducer::add_staged(const std::byte* earlier, std::byte* out, const float* staged,
                             std::int64_t count) const {
  const bool bf16 = options_.bf16;
  // Memory-bound: TBB spreads it over the cores, in blocks that keep each thread streaming.
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, count, 1 << 16),
      [=](const tbb::blocked_range<std::int64_t>& range) {
        const auto begin = static_cast<std::size_t>(range.begin());
        const auto end = static_cast<std::size_t>(range.end());
        if (bf16) {
          const auto* before = reinterpret_cast<const cpu_adam::bf16*>(earlier);
          auto* sum = reinterpret_cast<cpu_adam::bf16*>(out);
          for (std::size_t i = begin; i < end; ++i)
            sum[i] = cpu_adam::to_bf16((before ? cpu_adam::to_float(before[i]) : 0.0f) + staged[i]);
          return;
        }
        const auto* before = reinterpret_cast<const float*>(earlier);
        auto* sum = reinterpret_cast<float*>(out);
        for (std::size_t i = begin; i < end; ++i)
          sum[i] = (before ? before[i] : 0.0f) + staged[i];
      });
}

// The sum is formed exactly as the in-memory partition forms it (0 + first, then + each next),
// so the gradients have the same bits on either tier, signed zeros included. It is made in one of
// two piece buffers, from which it is written.
//
// The write is left in flight (write-behind): the queue goes on to the next piece while the disk
// takes this one, whose sum stays in its buffer until the write is waited for, by the next sum
// formed in that buffer, by a read of the range (grads(), a later micro-batch's read-back), or at
// the end of backward (global_stats).
void GradReducer::swap_piece(const Piece& piece) {
  const std::int64_t offset = piece.begin * grad_bytes();
  const int slot = next_write_;
  next_write_ = (next_write_ + 1) % kPieceWrites;
  const std::span<std::byte> sum(host_partition_ + slot * plan_.piece_elements * grad_bytes(),
                                 static_cast<std::size_t>(piece.count * grad_bytes()));
  PieceWrite& write = writes_[slot];
  try {
    finish_writes(write.begin, write.end);  // the buffer's last sum is on disk
  } catch (const aio::IoError& error) {
    throw swap_failure("the gradients of " + names_[write.module], error);
  }
  if (!piece.first) {
    finish_writes(piece.begin, piece.begin + piece.count);
    store_->wait(store_->submit_read(extent_, offset, sum));
    nvme_read_bytes_ += static_cast<std::int64_t>(sum.size());
  }
  add_staged(piece.first ? nullptr : sum.data(), sum.data(), staging(piece.slot), piece.count);
  const aio::Ticket ticket = store_->submit_write(extent_, offset, sum);
  {
    const std::lock_guard lock(writes_mutex_);
    write = PieceWrite{ticket, piece.module, piece.begin, piece.begin + piece.count};
  }
  nvme_write_bytes_ += static_cast<std::int64_t>(sum.size());
  if (!piece.last || piece.normed) return;
  scan_final(piece, sum.data());
}

// A final piece's tiles, into the module's partials: the module's sum of squares is then
// combined from them exactly as scan_gradients sums the whole shard (module_sum_squares).
void GradReducer::scan_final(const Piece& piece, const std::byte* grads) {
  const base::Timeline::Scope span("gradients", "scan", names_[piece.module]);
  const std::int64_t in_module = piece.begin - layout_.module(piece.module).partition_offset;
  STRATA_ASSERT(in_module % cpu_adam::kTileElements == 0);
  const std::span<cpu_adam::GradStats> partials =
      std::span(tile_partials_)
          .subspan(static_cast<std::size_t>(module_first_tile_[piece.module] +
                                            in_module / cpu_adam::kTileElements),
                   static_cast<std::size_t>(cpu_adam::gradient_tile_count(piece.count)));
  const auto n = static_cast<std::size_t>(piece.count);
  if (options_.bf16) {
    cpu_adam::scan_gradient_tiles<cpu_adam::bf16>(
        {reinterpret_cast<const cpu_adam::bf16*>(grads), n}, partials);
  } else {
    cpu_adam::scan_gradient_tiles<float>({reinterpret_cast<const float*>(grads), n}, partials);
  }
}

// This rank's sum of squares is one fp64 sum per module, each scan_gradients' sum of the
// module's final shard (a kernel on the device, or the queue's tile scans of its final pieces
// combined in the same tree), added last module first, the order backward finishes them: the
// same bits for every placement of the gradients on one rank. With several ranks two floats (sum,
// inf/NaN) go up for one all-reduce. No stream runs a host function for it: the host reads and
// writes the page-locked numbers between waits.
cpu_adam::GradStats GradReducer::global_stats() {
  const base::Timeline::Scope waiting("host", "wait", "gradient norm");
  if (!options_.to_host) return reduce_stats(device_sum_squares());
  // The device's failure first: the jobs that waited on its events fail with it.
  stream_.synchronize();
  jobs_.drain();
  // A module no backward reached this step holds no contribution: its gradients are zero. (The
  // engine's backward reaches every module; the swap file has no zeros to spare for one.)
  for (int m = 0; m < layout_.module_count(); ++m) {
    if (contributions_[m] > 0) continue;
    STRATA_ASSERT(!store_);
    const ModuleSlice& slice = layout_.module(m);
    std::memset(host_partition_ + slice.partition_offset * grad_bytes(), 0,
                static_cast<std::size_t>(slice.shard_numel * grad_bytes()));
    std::ranges::fill(module_tiles(m), cpu_adam::GradStats{});
  }
  if (store_) {
    // Backward's last writes: a step whose writes failed fails here, whatever reads them.
    try {
      finish_writes(0, layout_.partition_numel());
    } catch (const aio::IoError& error) {
      throw swap_failure("the gradients", error);
    }
  }
  if (std::ranges::any_of(normed_on_device_, [](char normed) { return normed != 0; })) {
    stream_.copy(module_norms_host_.data(), module_norms_.data(), module_norms_.bytes(),
                 gpu::CopyKind::device_to_host);
    stream_.synchronize();
  }
  const double* device_norms = module_norms_host_.as<double>();
  double local = 0.0;
  bool has_inf_or_nan = false;
  for (int m = layout_.module_count(); m-- > 0;) {
    if (normed_on_device_[m] != 0) {
      local += device_norms[m];
      continue;
    }
    const cpu_adam::GradStats module = cpu_adam::combine_gradient_tiles(module_tiles(m));
    local += module.sum_squares;
    has_inf_or_nan = has_inf_or_nan || module.has_inf_or_nan;
  }
  // sum_squares is inf or NaN exactly when a gradient is; a scan says so apart from its sum.
  if (has_inf_or_nan && std::isfinite(local)) local = std::numeric_limits<double>::quiet_NaN();
  return reduce_stats(local);
}

// On the device: gpu::Ops::sum_squares of each module's shard (cpu_adam's scan on the host
// backend, a kernel on CUDA), brought down one double at a time through the one device slot;
// its sum is inf or NaN exactly when a gradient is.
double GradReducer::device_sum_squares() {
  double* slot = stats_.as<double>();
  for (int m = 0; m < layout_.module_count(); ++m) {
    const ModuleSlice& slice = layout_.module(m);
    ops_.sum_squares(stream_, slot, device_partition() + slice.partition_offset, slice.shard_numel);
    stream_.copy(&module_sums_[m], slot, sizeof(double), gpu::CopyKind::device_to_host);
  }
  stream_.synchronize();
  double local = 0.0;
  for (int m = module_sums_.size(); m-- > 0;)
    local += module_sums_[m];
  return local;
}

std::span<cpu_adam::GradStats> GradReducer::module_tiles(int module) {
  const std::int64_t first = module_first_tile_[module];
  return std::span(tile_partials_)
      .subspan(static_cast<std::size_t>(first),
               static_cast<std::size_t>(module_first_tile_[module + 1] - first));
}

cpu_adam::GradStats GradReducer::reduce_stats(double local_sum_squares) {
  if (layout_.world_size() == 1) {
    return cpu_adam::GradStats{local_sum_squares, !std::isfinite(local_sum_squares)};
  }
  GradNorm* norm = stats_host_.as<GradNorm>();
  norm->reduced[0] = static_cast<float>(local_sum_squares);
  norm->reduced[1] = std::isfinite(local_sum_squares) ? 0.0f : 1.0f;
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
