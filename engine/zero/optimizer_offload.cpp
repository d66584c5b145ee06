#include "engine/zero/optimizer_offload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"
#include "cpu_adam/half.h"
#include "engine/memory/parallel_copy.h"

namespace strata::engine::zero {
namespace {

constexpr std::int64_t kBlock = 4096;

std::int64_t round_up(std::int64_t value) {
  return (value + kBlock - 1) / kBlock * kBlock;
}

// A sub-group in flight: its pool buffer and its move.
struct InFlight {
  int sub_group = 0;
  memory::PinnedPool::Lease lease;
  memory::Residency::Move move;
};

// Waits for what is still in flight after an error (its buffers must not be reused under a
// transfer); those transfers' own errors are dropped, the first one is what is rethrown.
void drain_reads(memory::Residency& residency, std::deque<InFlight>& reads) {
  for (InFlight& read : reads) {
    try {
      static_cast<void>(residency.finish_read(std::move(read.move)));
    } catch (const std::exception&) {
    }
  }
  reads.clear();
}

void drain_writes(memory::Residency& residency, std::deque<InFlight>& writes) {
  for (InFlight& write : writes) {
    try {
      residency.finish_write(std::move(write.move));
    } catch (const std::exception&) {
    }
  }
  writes.clear();
}

}  // namespace

OptimizerOffload::OptimizerOffload(gpu::Device& device, const Optimizer& optimizer,
                                   std::span<const float> master_params,
                                   OptimizerOffloadOptions options)
    : OptimizerOffload(device, optimizer, static_cast<std::int64_t>(master_params.size()),
                       std::move(options)) {
  fill_states([&](const SubGroupStates& states) {
    std::memcpy(states.params.data(), master_params.data() + states.range.begin,
                states.params.size_bytes());
    for (std::span<float> state : {states.exp_avg, states.exp_avg_sq})
      std::fill(state.begin(), state.end(), 0.0f);
  });
}

OptimizerOffload::OptimizerOffload(gpu::Device& device, const Optimizer& optimizer,
                                   std::int64_t partition_numel, OptimizerOffloadOptions options)
    : optimizer_(optimizer),
      options_(std::move(options)),
      numel_(partition_numel),
      has_exp_avg_(optimizer.type() != OptimizerType::adagrad),
      has_exp_avg_sq_(optimizer.type() != OptimizerType::lion) {
  if (options_.device == OffloadDevice::none)
    throw UserError("offload_optimizer.device is none, so there is no optimizer state to offload",
                    "set offload_optimizer.device to cpu or nvme", 2);
  if (options_.buffer_count < 1)
    throw UserError(fmt::format("offload_optimizer.buffer_count is {}; it must be at least 1",
                                options_.buffer_count),
                    "set offload_optimizer.buffer_count to 1 or more (DeepSpeed's default is 4)",
                    2);
  if (options_.sub_groups.empty() && options_.sub_group_size < 1)
    throw UserError(fmt::format("zero_optimization.sub_group_size is {}; it must be at least 1",
                                options_.sub_group_size),
                    "set zero_optimization.sub_group_size to a positive element count", 2);
  sub_groups_ = options_.sub_groups.empty() ? make_sub_groups(numel_, options_.sub_group_size)
                                            : options_.sub_groups;
  // The cut covers the partition in order, without gaps or empty sub-groups.
  for (std::size_t g = 0; g < sub_groups_.size(); ++g) {
    STRATA_ASSERT(sub_groups_[g].size() > 0);
    STRATA_ASSERT(sub_groups_[g].begin == (g == 0 ? 0 : sub_groups_[g - 1].end));
  }
  STRATA_ASSERT(sub_groups_.empty() || sub_groups_.back().end == numel_);
  const int moments = (has_exp_avg_ ? 1 : 0) + (has_exp_avg_sq_ ? 1 : 0);
  std::vector<std::int64_t> extents;
  std::int64_t largest = 0;
  for (const Range& range : sub_groups_) {
    master_region_bytes_.push_back(round_up(range.size() * options_.types.master_bytes()));
    moment_region_bytes_.push_back(round_up(range.size() * options_.types.moment_bytes()));
    extents.push_back(master_region_bytes_.back() + moments * moment_region_bytes_.back());
    largest = std::max(largest, extents.back());
  }

  if (options_.keep_capacity < 0)
    throw UserError(fmt::format("the optimizer's rollback window is {} sub-groups; it must not be "
                                "negative",
                                options_.keep_capacity),
                    "set offload_optimizer.buffer_count to 1 or more", 2);
  if (options_.keep_capacity > 0) {
    std::int64_t largest_numel = 0;
    for (const Range& range : sub_groups_)
      largest_numel = std::max(largest_numel, range.size());
    kept_extent_bytes_ = largest;
    kept_param_bytes_ = round_up(largest_numel * options_.keep_param_bytes_per_element);
    kept_states_ = aio::AlignedBuffer(options_.keep_capacity * kept_extent_bytes_);
    kept_params_ = aio::AlignedBuffer(options_.keep_capacity * kept_param_bytes_);
  }

  extent_bytes_ = extents;
  if (options_.pool != nullptr) {
    STRATA_ASSERT(options_.book != nullptr);
    pool_ = options_.pool;
    book_ = options_.book;
  } else {
    own_pool_ = std::make_unique<memory::PinnedPool>(device);
    own_book_ = std::make_unique<memory::Residency>();
    pool_ = own_pool_.get();
    book_ = own_book_.get();
  }
  user_ = book_->add_user("optimizer states");
  if (options_.device == OffloadDevice::cpu) {
    std::int64_t total = 0;
    for (std::int64_t bytes : extents)
      total += bytes;
    cpu_shelf_ = pool_->reserve(
        1, std::max<std::int64_t>(total, kBlock),
        memory::PinnedPoolOptions{options_.pin_memory, "optimizer states in CPU memory", true});
  } else {
    shelf_ =
        pool_->reserve(options_.buffer_count, std::max<std::int64_t>(largest, kBlock),
                       memory::PinnedPoolOptions{options_.pin_memory, "optimizer swap buffers"});
    if (options_.store != nullptr) {
      store_ = options_.store;
    } else {
      STRATA_ASSERT(own_pool_ != nullptr);
      own_store_ = std::make_unique<memory::NvmeStore>(options_.nvme);
      store_ = own_store_.get();
    }
    first_extent_ = store_->reserve(extents);
    // The extents hold nothing until fill_states writes them.
    for (std::size_t g = 0; g < sub_groups_.size(); ++g) {
      partitions_.push_back(book_->add_on_nvme(user_, fmt::format("optimizer states {}", g),
                                               extents[g], *store_,
                                               first_extent_ + static_cast<int>(g)));
    }
  }
  if (own_pool_) {
    own_pool_->open();
    if (own_store_) own_store_->open(own_pool_->pinned_arena());
    open();
  }
}

void OptimizerOffload::open() {
  STRATA_ASSERT(pool_->is_open());
  if (cpu_shelf_ < 0) return;
  STRATA_ASSERT(!cpu_states_);
  cpu_states_ = pool_->acquire(cpu_shelf_);
  std::int64_t offset = 0;
  for (std::size_t g = 0; g < sub_groups_.size(); ++g) {
    auto bytes = cpu_states_.bytes().subspan(static_cast<std::size_t>(offset),
                                             static_cast<std::size_t>(extent_bytes_[g]));
    partitions_.push_back(book_->add_in_cpu(user_, fmt::format("optimizer states {}", g), bytes));
    offset += extent_bytes_[g];
  }
}

OptimizerOffload::~OptimizerOffload() = default;

OptimizerOffload::Regions OptimizerOffload::regions(int sub_group,
                                                    std::span<std::byte> bytes) const {
  const auto g = static_cast<std::size_t>(sub_group);
  const auto numel = static_cast<std::size_t>(sub_groups_[g].size());
  const auto master = static_cast<std::size_t>(master_region_bytes_[g]);
  const auto moment = static_cast<std::size_t>(moment_region_bytes_[g]);
  const auto moment_bytes = numel * static_cast<std::size_t>(options_.types.moment_bytes());
  Regions result;
  result.params = bytes.first(numel * static_cast<std::size_t>(options_.types.master_bytes()));
  std::size_t next = master;
  if (has_exp_avg_) {
    result.exp_avg = bytes.subspan(next, moment_bytes);
    next += moment;
  }
  if (has_exp_avg_sq_) result.exp_avg_sq = bytes.subspan(next, moment_bytes);
  return result;
}

void OptimizerOffload::zero_padding(int sub_group, std::span<std::byte> bytes) const {
  const auto g = static_cast<std::size_t>(sub_group);
  const Regions r = regions(sub_group, bytes);
  auto pad = [](std::span<std::byte> values, std::int64_t region) {
    if (values.empty()) return;
    std::memset(values.data() + values.size(), 0, static_cast<std::size_t>(region) - values.size());
  };
  pad(r.params, master_region_bytes_[g]);
  pad(r.exp_avg, moment_region_bytes_[g]);
  pad(r.exp_avg_sq, moment_region_bytes_[g]);
}

// A later failure is usually the first one's consequence: the latch keeps the first, which later
// calls name, while this call's error is what this call throws.
UserError OptimizerOffload::fail(const std::exception& error, const std::string& doing) {
  failure_.fail(error.what());
  base::logger("engine").error("{} failed: {}", doing, error.what());
  return UserError(
      fmt::format("{} failed: {}; the optimizer states of this rank are now inconsistent (some "
                  "sub-groups were updated, others not)",
                  doing, error.what()),
      fix_of(error) + "; training cannot continue from this state");
}

void OptimizerOffload::mark_inconsistent(const std::string& cause) {
  if (!failure_.fail(cause)) return;
  base::logger("engine").error("the optimizer states of this rank are inconsistent: {}", cause);
}

void OptimizerOffload::step(const StepHyperparameters& hyper, const StepIo& io,
                            const StatesVisitor& stepped) {
  failure_.check();
  STRATA_ASSERT(io.grads != nullptr);
  std::vector<int> order(sub_groups_.size());
  for (std::size_t g = 0; g < order.size(); ++g)
    order[g] = static_cast<int>(g);
  try {
    if (later_fill_ && store_) {
      // Each sub-group is filled where the step would have read it, stepped and written once.
      const StatesVisitor fill = std::exchange(later_fill_, {});
      const std::function<void()> finished = std::exchange(later_finished_, {});
      aio::AlignedBuffer scratch_memory = stepped ? states_scratch() : aio::AlignedBuffer();
      const std::span<float> scratch(reinterpret_cast<float*>(scratch_memory.data()),
                                     static_cast<std::size_t>(scratch_memory.size_bytes()) / 4);
      fill_and_write(fill, [&](int g, std::span<std::byte> bytes) {
        compute_into_sink(g, bytes, hyper, io);
        if (stepped) stepped(states_of(g, bytes, scratch));
      });
      if (finished) finished();
      return;
    }
    run_step(hyper, io, order, {}, false, stepped);
  } catch (const std::exception& error) {
    throw fail(error, fmt::format("optimizer step {}", hyper.step));
  }
}

void OptimizerOffload::fill_states_later(StatesVisitor fill, std::function<void()> finished) {
  failure_.check();
  later_fill_ = {};
  later_finished_ = {};
  if (!store_) {
    fill_states(fill);
    if (finished) finished();
    return;
  }
  later_fill_ = std::move(fill);
  later_finished_ = std::move(finished);
}

void OptimizerOffload::fill_pending() {
  if (!later_fill_) return;
  const StatesVisitor fill = std::exchange(later_fill_, {});
  const std::function<void()> finished = std::exchange(later_finished_, {});
  try {
    fill_and_write(fill, {});
    if (finished) finished();
  } catch (const std::exception& error) {
    throw fail(error, "filling the optimizer states");
  }
}

void OptimizerOffload::step(const StepHyperparameters& hyper, std::span<const float> grads,
                            ParamCopy copy_type, std::span<std::uint16_t> copy) {
  PartitionGrads partition_grads(grads);
  PartitionMemory memory(std::as_writable_bytes(copy), sizeof(std::uint16_t));
  step(hyper, StepIo{&partition_grads, copy_type, copy.empty() ? nullptr : &memory});
}

int OptimizerOffload::step_sub_groups(const StepHyperparameters& hyper, const StepIo& io,
                                      std::span<const int> order, const Ready& ready,
                                      bool keep_prior, const WindingDown& winding_down) {
  failure_.check();
  fill_pending();
  STRATA_ASSERT(io.grads != nullptr);
  STRATA_ASSERT(!keep_prior ||
                options_.keep_param_bytes_per_element == param_bytes_per_element(io.copy_type));
  STRATA_ASSERT(!keep_prior ||
                static_cast<std::int64_t>(kept_.size() + order.size()) <= options_.keep_capacity);
  try {
    return run_step(hyper, io, order, Pace{ready, winding_down}, keep_prior, {});
  } catch (const std::exception& error) {
    throw fail(error, fmt::format("optimizer step {}", hyper.step));
  }
}

void OptimizerOffload::compute(int sub_group, std::span<std::byte> bytes,
                               const StepHyperparameters& hyper, const StepIo& io,
                               std::span<std::byte> new_params) {
  const base::Timeline::Scope span("optimizer", "sub-group", std::to_string(sub_group));
  const Range& range = sub_groups_[static_cast<std::size_t>(sub_group)];
  const auto size = static_cast<std::size_t>(range.size());
  const Regions r = regions(sub_group, bytes);
  const bool copies = io.copy_type != ParamCopy::none && !new_params.empty();
  STRATA_ASSERT(new_params.empty() ||
                new_params.size() ==
                    size * static_cast<std::size_t>(param_bytes_per_element(io.copy_type)));
  // bf16 masters exist only beside a bf16 copy (bf16.enabled), never as fp32 storage.
  STRATA_ASSERT(!options_.types.bf16_master_and_grads || io.copy_type == ParamCopy::bf16);
  const std::span<const std::byte> grads = io.grads->grads(range);
  optimizer_.step(
      hyper, options_.types, StateArrays{r.params, grads, r.exp_avg, r.exp_avg_sq}, range.size(),
      copies ? io.copy_type : ParamCopy::none,
      copies ? std::span<std::uint16_t>(reinterpret_cast<std::uint16_t*>(new_params.data()), size)
             : std::span<std::uint16_t>());
  if (io.copy_type == ParamCopy::none && !new_params.empty())
    std::memcpy(new_params.data(), r.params.data(), size * sizeof(float));
}

void OptimizerOffload::compute_into_sink(int sub_group, std::span<std::byte> bytes,
                                         const StepHyperparameters& hyper, const StepIo& io) {
  if (io.params == nullptr) {
    compute(sub_group, bytes, hyper, io, {});
    return;
  }
  const Range& range = sub_groups_[static_cast<std::size_t>(sub_group)];
  compute(sub_group, bytes, hyper, io, io.params->values(range));
  io.params->commit(range);
}

std::span<std::byte> OptimizerOffload::kept_states(std::size_t slot) {
  return kept_states_.span().subspan(slot * static_cast<std::size_t>(kept_extent_bytes_),
                                     static_cast<std::size_t>(kept_extent_bytes_));
}

// Slot `slot`'s new parameters of `sub_group`, waiting for commit_kept.
std::span<std::byte> OptimizerOffload::kept_new_params(std::size_t slot, int sub_group) {
  const Range& range = sub_groups_[static_cast<std::size_t>(sub_group)];
  return kept_params_.span().subspan(
      slot * static_cast<std::size_t>(kept_param_bytes_),
      static_cast<std::size_t>(range.size() * options_.keep_param_bytes_per_element));
}

std::size_t OptimizerOffload::keep(int sub_group, std::span<const std::byte> bytes) {
  const std::size_t slot = kept_.size();
  STRATA_ASSERT(static_cast<std::int64_t>(slot) < options_.keep_capacity);
  STRATA_ASSERT(static_cast<std::int64_t>(bytes.size()) <= kept_extent_bytes_);
  memory::copy_in_parallel(kept_states(slot).first(bytes.size()), bytes);
  kept_.push_back(sub_group);
  return slot;
}

void OptimizerOffload::commit_kept(const StepIo& io) {
  if (io.params != nullptr) {
    for (std::size_t slot = 0; slot < kept_.size(); ++slot) {
      const Range& range = sub_groups_[static_cast<std::size_t>(kept_[slot])];
      std::span<const std::byte> values = kept_new_params(slot, kept_[slot]);
      std::span<std::byte> target = io.params->values(range);
      memory::copy_in_parallel(target.first(values.size()), values);
      io.params->commit(range);
    }
  }
  kept_.clear();
}

void OptimizerOffload::undo_kept(const StepHyperparameters* redo, const StepIo& io) {
  failure_.check();
  try {
    for (std::size_t slot = 0; slot < kept_.size(); ++slot) {
      const int g = kept_[slot];
      const memory::PartitionId id = partitions_[static_cast<std::size_t>(g)];
      const auto bytes = static_cast<std::size_t>(book_->bytes(id));
      if (!store_) {
        memory::Residency::CpuView view = book_->view(id);
        memory::copy_in_parallel(view.bytes().first(bytes), kept_states(slot).first(bytes));
        if (redo != nullptr) compute_into_sink(g, view.bytes(), *redo, io);
        continue;
      }
      // The extent holds the step being undone: the prior value (redone or not) replaces it.
      memory::Residency::CpuView view = book_->replace(id, kept_states(slot).first(bytes));
      if (redo != nullptr) compute_into_sink(g, view.bytes(), *redo, io);
      book_->finish_write(book_->begin_write(std::move(view)));
    }
  } catch (const std::exception& error) {
    kept_.clear();
    throw fail(error, "undoing an overlapped optimizer step");
  }
  kept_.clear();
}

int OptimizerOffload::run_step(const StepHyperparameters& hyper, const StepIo& io,
                               std::span<const int> order, const Pace& pace, bool keep_prior,
                               const StatesVisitor& visit) {
  const int n = static_cast<int>(order.size());
  int stepped = 0;
  // bf16 states reach `visit` widened, through one sub-group of fp32 scratch.
  aio::AlignedBuffer scratch_memory = visit ? states_scratch() : aio::AlignedBuffer();
  const std::span<float> scratch(reinterpret_cast<float*>(scratch_memory.data()),
                                 static_cast<std::size_t>(scratch_memory.size_bytes()) / 4);
  // A kept sub-group's new parameters wait in its slot; the others go to the sink now.
  auto step_one = [&](int g, std::span<std::byte> bytes) {
    if (keep_prior) {
      const std::size_t slot = keep(g, bytes);
      compute(g, bytes, hyper, io,
              io.params == nullptr ? std::span<std::byte>() : kept_new_params(slot, g));
    } else {
      compute_into_sink(g, bytes, hyper, io);
    }
    if (visit) visit(states_of(g, bytes, scratch));
  };
  const auto winding_down = [&] { return pace.winding_down && pace.winding_down(); };
  if (!store_) {
    for (int g : order) {
      if (winding_down() || (pace.ready && !pace.ready(g))) break;
      memory::Residency::CpuView view = book_->view(partitions_[static_cast<std::size_t>(g)]);
      step_one(g, view.bytes());
      ++stepped;
    }
    return stepped;
  }

  const std::int64_t count = pool_->buffer_count(shelf_);
  // How far reads run ahead of the sub-group being computed: every buffer not needed by the
  // current sub-group and, with pipeline_write, by the one being written.
  const std::int64_t ahead =
      options_.pipeline_read
          ? std::max<std::int64_t>(1, count - 1 - (options_.pipeline_write ? 1 : 0))
          : 0;
  std::deque<InFlight> reads;
  std::deque<InFlight> writes;
  int next_read = 0;  // index into order
  peak_in_flight_ = 0;

  // A buffer: a free one, else (when `wait_for_write`) the one of the oldest write once it is
  // done, else (when `must`) the next one given back.
  auto buffer = [&](bool wait_for_write, bool must) {
    memory::PinnedPool::Lease lease = pool_->try_acquire(shelf_);
    if (!lease && wait_for_write && !writes.empty()) {
      InFlight oldest = std::move(writes.front());
      writes.pop_front();
      book_->finish_write(std::move(oldest.move));
      lease = std::move(oldest.lease);
    }
    if (!lease && must) lease = pool_->acquire(shelf_);
    return lease;
  };
  auto issue_read = [&](memory::PinnedPool::Lease lease) {
    const int g = order[static_cast<std::size_t>(next_read)];
    const memory::PartitionId id = partitions_[static_cast<std::size_t>(g)];
    memory::Residency::Move move = book_->begin_read(id, lease.bytes());
    reads.push_back({g, std::move(lease), std::move(move)});
    ++next_read;
  };
  auto finish_writes = [&] {
    while (!writes.empty()) {
      InFlight oldest = std::move(writes.front());
      writes.pop_front();
      book_->finish_write(std::move(oldest.move));
    }
  };

  try {
    for (int i = 0; i < n; ++i) {
      const int g = order[static_cast<std::size_t>(i)];
      if (reads.empty()) {
        if (winding_down()) break;  // nothing read ahead is left to step
        issue_read(buffer(true, true));
      }
      while (next_read < n && next_read <= i + ahead && !winding_down()) {
        memory::PinnedPool::Lease lease = buffer(next_read == i + 1, false);
        if (!lease) break;
        issue_read(std::move(lease));
      }
      peak_in_flight_ = std::max<std::int64_t>(
          peak_in_flight_, static_cast<std::int64_t>(reads.size() + writes.size()));
      if (pace.ready && !pace.ready(g)) {
        // Stopped: the sub-groups read ahead are unchanged, so their extents still hold them.
        while (!reads.empty()) {
          InFlight read = std::move(reads.front());
          reads.pop_front();
          book_->drop_clean(book_->finish_read(std::move(read.move)));
        }
        break;
      }
      InFlight current = std::move(reads.front());
      reads.pop_front();
      STRATA_ASSERT(current.sub_group == g);
      memory::Residency::CpuView view = book_->finish_read(std::move(current.move));
      step_one(g, view.bytes());
      ++stepped;
      current.move = book_->begin_write(std::move(view));
      if (options_.pipeline_write) {
        writes.push_back(std::move(current));
      } else {
        book_->finish_write(std::move(current.move));
      }
    }
    finish_writes();
  } catch (...) {
    drain_reads(*book_, reads);
    drain_writes(*book_, writes);
    throw;
  }
  return stepped;
}

void OptimizerOffload::read_states(std::span<float> params, std::span<float> exp_avg,
                                   std::span<float> exp_avg_sq) {
  visit_states([&](const SubGroupStates& states) {
    const auto begin = static_cast<std::size_t>(states.range.begin);
    auto out = [&](std::span<float> target, std::span<const float> source) {
      if (!target.empty() && !source.empty())
        std::memcpy(target.data() + begin, source.data(), source.size_bytes());
    };
    out(params, states.params);
    out(exp_avg, states.exp_avg);
    out(exp_avg_sq, states.exp_avg_sq);
  });
}

aio::AlignedBuffer OptimizerOffload::states_scratch() const {
  if (options_.types.all_fp32()) return {};
  std::int64_t largest = 0;
  for (const Range& range : sub_groups_)
    largest = std::max(largest, range.size());
  return aio::AlignedBuffer(3 * largest * static_cast<std::int64_t>(sizeof(float)));
}

OptimizerOffload::SubGroupStates OptimizerOffload::states_of(int sub_group,
                                                             std::span<std::byte> bytes,
                                                             std::span<float> scratch) const {
  const Range range = sub_groups_[static_cast<std::size_t>(sub_group)];
  const auto numel = static_cast<std::size_t>(range.size());
  const Regions r = regions(sub_group, bytes);
  SubGroupStates states{range, {}, {}, {}};
  std::size_t next = 0;
  auto as_floats = [&](std::span<std::byte> region, std::int64_t element_bytes) {
    if (region.empty()) return std::span<float>();
    if (element_bytes == 4) return std::span<float>(reinterpret_cast<float*>(region.data()), numel);
    std::span<float> wide = scratch.subspan(next, numel);
    next += numel;
    const auto* bits = reinterpret_cast<const cpu_adam::bf16*>(region.data());
    for (std::size_t i = 0; i < numel; ++i)
      wide[i] = cpu_adam::to_float(bits[i]);
    return wide;
  };
  states.params = as_floats(r.params, options_.types.master_bytes());
  states.exp_avg = as_floats(r.exp_avg, options_.types.moment_bytes());
  states.exp_avg_sq = as_floats(r.exp_avg_sq, options_.types.moment_bytes());
  return states;
}

void OptimizerOffload::narrow_into(int sub_group, const SubGroupStates& states,
                                   std::span<std::byte> bytes) const {
  const Regions r = regions(sub_group, bytes);
  auto narrow = [](std::span<const float> wide, std::span<std::byte> region,
                   std::int64_t element_bytes) {
    if (region.empty() || element_bytes == 4) return;  // fp32: written in place
    auto* bits = reinterpret_cast<cpu_adam::bf16*>(region.data());
    for (std::size_t i = 0; i < wide.size(); ++i)
      bits[i] = cpu_adam::to_bf16(wide[i]);
  };
  narrow(states.params, r.params, options_.types.master_bytes());
  narrow(states.exp_avg, r.exp_avg, options_.types.moment_bytes());
  narrow(states.exp_avg_sq, r.exp_avg_sq, options_.types.moment_bytes());
}

void OptimizerOffload::visit_states(const StatesVisitor& visit) {
  failure_.check();
  fill_pending();
  const int count = static_cast<int>(sub_groups_.size());
  // bf16 states reach the visitor widened, through one sub-group of fp32 scratch.
  aio::AlignedBuffer scratch_memory = states_scratch();
  const std::span<float> scratch(reinterpret_cast<float*>(scratch_memory.data()),
                                 static_cast<std::size_t>(scratch_memory.size_bytes()) / 4);
  if (!store_) {
    for (int g = 0; g < count; ++g) {
      visit(states_of(g, book_->view(partitions_[static_cast<std::size_t>(g)]).bytes(), scratch));
    }
    return;
  }
  std::deque<InFlight> reads;
  int next = 0;
  for (int g = 0; g < count; ++g) {
    InFlight read;
    memory::Residency::CpuView view;
    try {
      // Reads ahead into every free buffer; the states are not changed, so each goes back clean.
      while (next < count) {
        memory::PinnedPool::Lease lease =
            next == g ? pool_->acquire(shelf_) : pool_->try_acquire(shelf_);
        if (!lease) break;
        memory::Residency::Move move =
            book_->begin_read(partitions_[static_cast<std::size_t>(next)], lease.bytes());
        reads.push_back({next++, std::move(lease), std::move(move)});
      }
      read = std::move(reads.front());
      reads.pop_front();
      view = book_->finish_read(std::move(read.move));
    } catch (const aio::IoError& error) {
      drain_reads(*book_, reads);
      throw fail(error, "reading the optimizer states for a checkpoint");
    }
    try {
      visit(states_of(g, view.bytes(), scratch));
    } catch (...) {
      // The visitor's own failure (the checkpoint's disk): the states are intact.
      book_->drop_clean(std::move(view));
      drain_reads(*book_, reads);
      throw;
    }
    book_->drop_clean(std::move(view));
  }
}

void OptimizerOffload::fill_states(const StatesVisitor& fill) {
  failure_.check();
  later_fill_ = {};  // replaced
  later_finished_ = {};
  try {
    fill_and_write(fill, {});
  } catch (const aio::IoError& error) {
    throw fail(error, "writing the optimizer states");
  }
}

void OptimizerOffload::fill_and_write(const StatesVisitor& fill, const FilledSubGroup& then) {
  const int count = static_cast<int>(sub_groups_.size());
  // `fill` writes every element of the regions; only the padding after each region is zeroed
  // here, so that the swap file holds no stale bytes of another sub-group. bf16 states are
  // filled as fp32 in one sub-group of scratch and rounded into the extent.
  aio::AlignedBuffer scratch_memory = states_scratch();
  const std::span<float> scratch(reinterpret_cast<float*>(scratch_memory.data()),
                                 static_cast<std::size_t>(scratch_memory.size_bytes()) / 4);
  auto filled = [&](int g, std::span<std::byte> bytes) {
    zero_padding(g, bytes);
    const SubGroupStates states = states_of(g, bytes, scratch);
    fill(states);
    narrow_into(g, states, bytes);
    if (then) then(g, bytes);
  };
  if (!store_) {
    for (int g = 0; g < count; ++g)
      filled(g, book_->view(partitions_[static_cast<std::size_t>(g)]).bytes());
    return;
  }
  std::deque<InFlight> writes;
  try {
    for (int g = 0; g < count; ++g) {
      memory::PinnedPool::Lease lease = pool_->try_acquire(shelf_);
      if (!lease) {
        // Out of the queue first: a failed write must not be waited for again by the drain.
        InFlight oldest = std::move(writes.front());
        writes.pop_front();
        book_->finish_write(std::move(oldest.move));
        lease = std::move(oldest.lease);
      }
      const memory::PartitionId id = partitions_[static_cast<std::size_t>(g)];
      auto bytes = lease.bytes().first(static_cast<std::size_t>(book_->bytes(id)));
      filled(g, bytes);
      memory::Residency::CpuView view = book_->replace(id, bytes);
      writes.push_back({g, std::move(lease), book_->begin_write(std::move(view))});
    }
    while (!writes.empty()) {
      InFlight oldest = std::move(writes.front());
      writes.pop_front();
      book_->finish_write(std::move(oldest.move));
    }
  } catch (...) {
    drain_writes(*book_, writes);
    throw;  // the caller marks the states inconsistent
  }
}

}  // namespace strata::engine::zero
