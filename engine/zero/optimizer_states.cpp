#include "engine/zero/optimizer_states.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <utility>

#include "base/assert.h"
#include "base/log.h"
#include "base/round_up.h"
#include "cpu_adam/half.h"
#include "engine/zero/sub_group_moves.h"

namespace strata::engine::zero {
namespace {

constexpr std::int64_t kBlock = 4096;

}  // namespace

void check_optimizer_offload_options(const OptimizerOffloadOptions& options) {
  if (options.device == OffloadDevice::none)
    throw UserError("offload_optimizer.device is none, so there is no optimizer state to offload",
                    "set offload_optimizer.device to cpu or nvme", 2);
  if (options.buffer_count < 1)
    throw UserError(fmt::format("offload_optimizer.buffer_count is {}; it must be at least 1",
                                options.buffer_count),
                    "set offload_optimizer.buffer_count to 1 or more (DeepSpeed's default is 4)",
                    2);
  if (options.sub_groups.empty() && options.sub_group_size < 1)
    throw UserError(fmt::format("zero_optimization.sub_group_size is {}; it must be at least 1",
                                options.sub_group_size),
                    "set zero_optimization.sub_group_size to a positive element count", 2);
}

OptimizerStatesPlan plan_optimizer_states(const OptimizerOffloadOptions& options,
                                          std::int64_t partition_numel, int moments) {
  OptimizerStatesPlan plan;
  // An empty partition has no sub-groups, whatever sub_group_size says.
  plan.sub_groups = options.sub_groups.empty() && partition_numel > 0
                        ? make_sub_groups(partition_numel, options.sub_group_size)
                        : options.sub_groups;
  for (const Range& range : plan.sub_groups) {
    plan.master_region_bytes.push_back(
        base::round_up(range.size() * options.types.master_bytes(), kBlock));
    plan.moment_region_bytes.push_back(
        base::round_up(range.size() * options.types.moment_bytes(), kBlock));
    plan.extent_bytes.push_back(plan.master_region_bytes.back() +
                                moments * plan.moment_region_bytes.back());
    plan.total_extent_bytes += plan.extent_bytes.back();
    plan.largest_extent_bytes = std::max(plan.largest_extent_bytes, plan.extent_bytes.back());
    plan.largest_sub_group = std::max(plan.largest_sub_group, range.size());
  }
  if (options.device == OffloadDevice::cpu) {
    plan.shelf_buffers = 1;
    plan.shelf_buffer_bytes = std::max<std::int64_t>(plan.total_extent_bytes, kBlock);
  } else {
    plan.shelf_buffers = options.buffer_count;
    plan.shelf_buffer_bytes = std::max<std::int64_t>(plan.largest_extent_bytes, kBlock);
  }
  return plan;
}

std::int64_t OptimizerStatesPlan::rollback_slot_bytes(std::int64_t param_bytes_per_element) const {
  return largest_extent_bytes + base::round_up(largest_sub_group * param_bytes_per_element, kBlock);
}

OptimizerStates::OptimizerStates(const Optimizer& optimizer, std::int64_t partition_numel,
                                 const OptimizerOffloadOptions& options)
    : numel_(partition_numel),
      types_(options.types),
      has_exp_avg_(optimizer.type() != OptimizerType::adagrad),
      has_exp_avg_sq_(optimizer.type() != OptimizerType::lion) {
  check_optimizer_offload_options(options);
  plan_ =
      plan_optimizer_states(options, numel_, (has_exp_avg_ ? 1 : 0) + (has_exp_avg_sq_ ? 1 : 0));
  // The cut covers the partition in order, without gaps or empty sub-groups.
  const std::vector<Range>& groups = plan_.sub_groups;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    STRATA_ASSERT(groups[g].size() > 0);
    STRATA_ASSERT(groups[g].begin == (g == 0 ? 0 : groups[g - 1].end));
  }
  STRATA_ASSERT(groups.empty() || groups.back().end == numel_);
  reserve_memory(options);
}

void OptimizerStates::reserve_memory(const OptimizerOffloadOptions& options) {
  STRATA_ASSERT(options.pool != nullptr && options.book != nullptr);
  pool_ = options.pool;
  book_ = options.book;
  user_ = book_->add_user("optimizer states");
  if (options.device == OffloadDevice::cpu) {
    cpu_shelf_ = pool_->reserve(
        plan_.shelf_buffers, plan_.shelf_buffer_bytes,
        memory::PinnedPoolOptions{options.pin_memory, "optimizer states in CPU memory", true});
    return;
  }
  STRATA_ASSERT(options.store != nullptr);
  shelf_ = pool_->reserve(plan_.shelf_buffers, plan_.shelf_buffer_bytes,
                          memory::PinnedPoolOptions{options.pin_memory, "optimizer swap buffers"});
  store_ = options.store;
  first_extent_ = store_->reserve(plan_.extent_bytes);
  // The extents hold nothing until fill_states writes them.
  for (std::size_t g = 0; g < plan_.sub_groups.size(); ++g) {
    partitions_.push_back(book_->add_on_nvme(user_, fmt::format("optimizer states {}", g),
                                             plan_.extent_bytes[g], *store_,
                                             first_extent_ + static_cast<int>(g)));
  }
}

void OptimizerStates::open() {
  STRATA_ASSERT(pool_->is_open());
  if (cpu_shelf_ < 0) return;
  STRATA_ASSERT(!cpu_states_);
  cpu_states_ = pool_->acquire(cpu_shelf_);
  std::int64_t offset = 0;
  for (std::size_t g = 0; g < plan_.sub_groups.size(); ++g) {
    auto bytes = cpu_states_.bytes().subspan(static_cast<std::size_t>(offset),
                                             static_cast<std::size_t>(plan_.extent_bytes[g]));
    partitions_.push_back(book_->add_in_cpu(user_, fmt::format("optimizer states {}", g), bytes));
    offset += plan_.extent_bytes[g];
  }
}

OptimizerStates::Regions OptimizerStates::regions(int sub_group, std::span<std::byte> bytes) const {
  const auto g = static_cast<std::size_t>(sub_group);
  const auto numel = static_cast<std::size_t>(plan_.sub_groups[g].size());
  const auto master = static_cast<std::size_t>(plan_.master_region_bytes[g]);
  const auto moment = static_cast<std::size_t>(plan_.moment_region_bytes[g]);
  const auto moment_bytes = numel * static_cast<std::size_t>(types_.moment_bytes());
  Regions result;
  result.params = bytes.first(numel * static_cast<std::size_t>(types_.master_bytes()));
  std::size_t next = master;
  if (has_exp_avg_) {
    result.exp_avg = bytes.subspan(next, moment_bytes);
    next += moment;
  }
  if (has_exp_avg_sq_) result.exp_avg_sq = bytes.subspan(next, moment_bytes);
  return result;
}

void OptimizerStates::zero_padding(int sub_group, std::span<std::byte> bytes) const {
  const auto g = static_cast<std::size_t>(sub_group);
  const Regions r = regions(sub_group, bytes);
  auto pad = [](std::span<std::byte> values, std::int64_t region) {
    if (values.empty()) return;
    std::memset(values.data() + values.size(), 0, static_cast<std::size_t>(region) - values.size());
  };
  pad(r.params, plan_.master_region_bytes[g]);
  pad(r.exp_avg, plan_.moment_region_bytes[g]);
  pad(r.exp_avg_sq, plan_.moment_region_bytes[g]);
}

// A later failure is usually the first one's consequence: the latch keeps the first, which later
// calls name, while this call's error is what this call throws.
UserError OptimizerStates::fail(const std::exception& error, const std::string& doing) {
  failure_.fail(error.what());
  base::logger("engine").error("{} failed: {}", doing, error.what());
  return UserError(
      fmt::format("{} failed: {}; the optimizer states of this rank are now inconsistent (some "
                  "sub-groups were updated, others not)",
                  doing, error.what()),
      fix_of(error) + "; training cannot continue from this state");
}

void OptimizerStates::mark_inconsistent(const std::string& cause) {
  if (!failure_.fail(cause)) return;
  base::logger("engine").error("the optimizer states of this rank are inconsistent: {}", cause);
}

void OptimizerStates::fill_states_later(StatesVisitor fill, std::function<void()> finished) {
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

std::pair<OptimizerStates::StatesVisitor, std::function<void()>>
OptimizerStates::take_later_fill() {
  return {std::exchange(later_fill_, {}), std::exchange(later_finished_, {})};
}

void OptimizerStates::fill_pending() {
  if (!later_fill_) return;
  const auto [fill, finished] = take_later_fill();
  try {
    fill_and_write(fill, {});
    if (finished) finished();
  } catch (const std::exception& error) {
    throw fail(error, "filling the optimizer states");
  }
}

void OptimizerStates::read_states(std::span<float> params, std::span<float> exp_avg,
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

aio::AlignedBuffer OptimizerStates::states_scratch() const {
  if (types_.all_fp32()) return {};
  return aio::AlignedBuffer(3 * plan_.largest_sub_group * static_cast<std::int64_t>(sizeof(float)));
}

OptimizerStates::SubGroupStates OptimizerStates::states_of(int sub_group,
                                                           std::span<std::byte> bytes,
                                                           std::span<float> scratch) const {
  const Range range = range_of(sub_group);
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
  states.params = as_floats(r.params, types_.master_bytes());
  states.exp_avg = as_floats(r.exp_avg, types_.moment_bytes());
  states.exp_avg_sq = as_floats(r.exp_avg_sq, types_.moment_bytes());
  return states;
}

void OptimizerStates::narrow_into(int sub_group, const SubGroupStates& states,
                                  std::span<std::byte> bytes) const {
  const Regions r = regions(sub_group, bytes);
  auto narrow = [](std::span<const float> wide, std::span<std::byte> region,
                   std::int64_t element_bytes) {
    if (region.empty() || element_bytes == 4) return;  // fp32: written in place
    auto* bits = reinterpret_cast<cpu_adam::bf16*>(region.data());
    for (std::size_t i = 0; i < wide.size(); ++i)
      bits[i] = cpu_adam::to_bf16(wide[i]);
  };
  narrow(states.params, r.params, types_.master_bytes());
  narrow(states.exp_avg, r.exp_avg, types_.moment_bytes());
  narrow(states.exp_avg_sq, r.exp_avg_sq, types_.moment_bytes());
}

void OptimizerStates::visit_states(const StatesVisitor& visit) {
  failure_.check();
  fill_pending();
  // bf16 states reach the visitor widened, through one sub-group of fp32 scratch.
  aio::AlignedBuffer scratch_memory = states_scratch();
  const std::span<float> scratch(reinterpret_cast<float*>(scratch_memory.data()),
                                 static_cast<std::size_t>(scratch_memory.size_bytes()) / 4);
  if (store_) {
    visit_from_nvme(visit, scratch);
    return;
  }
  for (int g = 0; g < static_cast<int>(plan_.sub_groups.size()); ++g)
    visit(states_of(g, book_->view(partition(g)).bytes(), scratch));
}

void OptimizerStates::visit_from_nvme(const StatesVisitor& visit, std::span<float> scratch) {
  const int count = static_cast<int>(plan_.sub_groups.size());
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
        memory::Residency::Move move = book_->begin_read(partition(next), lease.bytes());
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

void OptimizerStates::fill_states(const StatesVisitor& fill) {
  failure_.check();
  later_fill_ = {};  // replaced
  later_finished_ = {};
  try {
    fill_and_write(fill, {});
  } catch (const aio::IoError& error) {
    throw fail(error, "writing the optimizer states");
  }
}

void OptimizerStates::fill_and_write(const StatesVisitor& fill, const FilledSubGroup& then) {
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
  if (store_) {
    write_from_pool(filled);
    return;
  }
  for (int g = 0; g < static_cast<int>(plan_.sub_groups.size()); ++g)
    filled(g, book_->view(partition(g)).bytes());
}

void OptimizerStates::write_from_pool(const FilledSubGroup& filled) {
  std::deque<InFlight> writes;
  try {
    for (int g = 0; g < static_cast<int>(plan_.sub_groups.size()); ++g) {
      memory::PinnedPool::Lease lease = pool_->try_acquire(shelf_);
      if (!lease) {
        // Out of the queue first: a failed write must not be waited for again by the drain.
        InFlight oldest = std::move(writes.front());
        writes.pop_front();
        book_->finish_write(std::move(oldest.move));
        lease = std::move(oldest.lease);
      }
      const memory::PartitionId id = partition(g);
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

void fill_with_masters(OptimizerStates& states, std::span<const float> master_params) {
  states.fill_states([&](const OptimizerStates::SubGroupStates& sub_group) {
    std::memcpy(sub_group.params.data(), master_params.data() + sub_group.range.begin,
                sub_group.params.size_bytes());
    for (std::span<float> state : {sub_group.exp_avg, sub_group.exp_avg_sq})
      std::fill(state.begin(), state.end(), 0.0f);
  });
}

}  // namespace strata::engine::zero
