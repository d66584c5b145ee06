// Engine::save_checkpoint and Engine::load_checkpoint (docs/checkpoints.md): each rank streams
// its partition of the optimizer states, from whichever tier holds them, into one safetensors
// file per state, stored by parameter name and offset; rank 0 writes the manifest and moves the
// checkpoint into place. Loading asks for this layout's pieces by name and offset, so it does not
// matter which stage, offload or world size saved them.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>

#include "aio/engine.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/checkpoint/save_directory.h"
#include "engine/checkpoint/shard_writer.h"
#include "engine/checkpoint/state_stream.h"
#include "engine/engine_state.h"
#include "engine/zero/offload_options.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using checkpoint::ManifestFile;

// Tags travel between ranks in a buffer of this size (check_tag keeps them shorter).
constexpr std::int64_t kTagBytes = 256;
// What a rank tells rank 0 about each state file it wrote: bytes and CRC32C, or -1 bytes when
// the rank failed.
constexpr std::int64_t kFileRecords = 3 * 2;

const char* precision_of(const Config& config) {
  return config.bf16.enabled ? "bf16" : config.fp16.enabled ? "fp16" : "fp32";
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The aio engine of a save or a load: the run's aio settings, without sidecar checksums (the
// manifest's CRC32C of each file stands for them), with the faults a test planted.
aio::Engine checkpoint_io(const Config& config, const aio::FaultPlan& faults) {
  aio::EngineOptions options = zero::aio_options(config.aio);
  options.verify_checksums = false;
  return aio::Engine(options, faults);
}

// A sub-group's states for a ShardWriter: those the optimizer keeps, in state_names() order.
std::vector<std::span<const float>> kept_states(
    const zero::OptimizerOffload::SubGroupStates& states) {
  std::vector<std::span<const float>> values = {states.params};
  if (!states.exp_avg.empty()) values.emplace_back(states.exp_avg);
  if (!states.exp_avg_sq.empty()) values.emplace_back(states.exp_avg_sq);
  return values;
}

// Fills `out` with elements [range.begin, range.end) of the partition: each piece of it from the
// checkpoint's stream of the state, the padding between pieces zero.
void fill_range(checkpoint::StateStream& stream, checkpoint::PieceCursor& cursor, zero::Range range,
                std::span<float> out) {
  std::int64_t filled = range.begin;  // out holds the partition's elements up to here
  auto zero_up_to = [&](std::int64_t end) {
    std::fill(out.begin() + (filled - range.begin), out.begin() + (end - range.begin), 0.0f);
  };
  cursor.for_each_in(
      range, [&](const checkpoint::Piece& piece, std::int64_t begin, std::int64_t end) {
        zero_up_to(begin);
        stream.read(piece.tensor->name, piece.param_offset + (begin - piece.partition_offset),
                    out.subspan(static_cast<std::size_t>(begin - range.begin),
                                static_cast<std::size_t>(end - begin)));
        filled = end;
      });
  zero_up_to(range.end);
}

// The optimizer states a load leaves to the first step (OptimizerOffload::fill_states_later):
// a second pass over the checkpoint's files, each state in partition order, verified at the end.
struct LaterLoad {
  LaterLoad(std::shared_ptr<const checkpoint::ShardReader> reader_in, const Config& config,
            const aio::FaultPlan& faults, std::vector<checkpoint::Piece> pieces_in,
            const std::vector<std::string>& states)
      : reader(std::move(reader_in)),
        io(checkpoint_io(config, faults)),
        pieces(std::move(pieces_in)) {
    for (const std::string& name : states) {
      streams.emplace(name, std::make_unique<checkpoint::StateStream>(io, *reader, name));
      cursors.emplace(name, checkpoint::PieceCursor(pieces));
    }
  }

  void fill(const zero::OptimizerOffload::SubGroupStates& states) {
    fill_range(*streams.at(checkpoint::kMasterState), cursors.at(checkpoint::kMasterState),
               states.range, states.params);
    if (!states.exp_avg.empty()) {
      fill_range(*streams.at(checkpoint::kExpAvgState), cursors.at(checkpoint::kExpAvgState),
                 states.range, states.exp_avg);
    }
    if (!states.exp_avg_sq.empty()) {
      fill_range(*streams.at(checkpoint::kExpAvgSqState), cursors.at(checkpoint::kExpAvgSqState),
                 states.range, states.exp_avg_sq);
    }
  }

  void finish() {
    for (auto& [name, stream] : streams)
      stream->finish();
  }

  std::shared_ptr<const checkpoint::ShardReader> reader;
  aio::Engine io;
  std::vector<checkpoint::Piece> pieces;  // the cursors walk them
  std::map<std::string, std::unique_ptr<checkpoint::StateStream>> streams;
  std::map<std::string, checkpoint::PieceCursor> cursors;
};

}  // namespace

PlannedSave::PlannedSave(fs::path dir_in, std::string tag_in, const Config& config,
                         const aio::FaultPlan& faults)
    : dir(std::move(dir_in)), tag(std::move(tag_in)), io(checkpoint_io(config, faults)) {}

void PlannedSave::write(const zero::OptimizerOffload::SubGroupStates& states) noexcept {
  if (!writer) return;
  try {
    writer->write(states.range, kept_states(states));
  } catch (...) {
    failure = std::current_exception();
    writer.reset();  // its partial files are removed
  }
}

zero::OptimizerOffload::StatesVisitor Engine::State::planned_save_writer() {
  if (!planned_save || planned_save->batches != batches_trained || planned_save->step >= 0)
    return {};
  return [save = planned_save.get()](const zero::OptimizerOffload::SubGroupStates& states) {
    save->write(states);
  };
}

void Engine::State::check_usable() const {
  if (!unusable.empty()) {
    throw UserError(unusable,
                    "load a checkpoint into a new run (strata train --resume DIR): this one's "
                    "states were partly overwritten",
                    1);
  }
}

bool Engine::State::inconsistent() const {
  return tier->inconsistent() || (offload && offload->inconsistent());
}

std::string Engine::State::resume_advice() const {
  if (!last_checkpoint.empty()) {
    return fmt::format("resume from the last checkpoint: strata train --resume {}",
                       last_checkpoint.parent_path().string());
  }
  if (!config.checkpoint.dir.empty()) {
    return fmt::format("restart the run: it has saved no checkpoint into {} yet",
                       config.checkpoint.dir);
  }
  return "restart the run: it saves no checkpoints (set strata.checkpoint.dir or strata train "
         "--save-dir DIR --save-every N to have one to resume from)";
}

std::vector<std::string> Engine::State::state_names() const {
  std::vector<std::string> names = {checkpoint::kMasterState};
  if (optimizer.type() != OptimizerType::adagrad) names.emplace_back(checkpoint::kExpAvgState);
  if (optimizer.type() != OptimizerType::lion) names.emplace_back(checkpoint::kExpAvgSqState);
  return names;
}

checkpoint::Manifest Engine::State::manifest_for(const std::string& tag) const {
  checkpoint::Manifest m;
  m.tag = tag;
  m.step = steps_taken;
  m.batches = batches_trained;
  m.seed = config.strata.seed;
  m.world_size = runtime.comm.world_size();
  m.shard_ranks = layout.world_size();
  m.stage = config.zero.stage;
  m.offload_param = to_string(config.zero.offload_param.device);
  m.offload_optimizer = to_string(config.zero.offload_optimizer.device);
  m.optimizer = to_string(config.optimizer.type);
  m.precision = precision_of(config);
  m.loss_scaler = loss_scaler.state();
  m.config = to_json(config);
  if (!config.strata.model.hf_config.empty()) {
    // Read at start-up by the model; a file changed since is the user's to answer for.
    std::ifstream in(config.strata.model.hf_config);
    m.model_config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (m.model_config.is_discarded()) m.model_config = nullptr;
  }
  for (const zero::TensorSlot& slot : layout.all_tensors())
    m.tensors.push_back({slot.name, slot.shape, slot.unpadded_rows});
  m.states = state_names();
  return m;
}

// Every rank saves under rank 0's tag; checkpoint.tag_validation says what a rank that passed
// another one gets (DeepSpeed's check that all ranks agree on the tag).
std::string Engine::State::agree_on_tag(const std::string& tag) {
  checkpoint::check_tag(tag);
  if (static_cast<std::int64_t>(tag.size()) >= kTagBytes) {
    throw UserError(fmt::format("checkpoint tag \"{}\" is {} bytes long", tag, tag.size()),
                    fmt::format("use a tag shorter than {} bytes", kTagBytes), 2);
  }
  gpu::Comm& comm = runtime.comm;
  if (comm.world_size() == 1) return tag;
  std::array<char, kTagBytes> text{};
  std::memcpy(text.data(), tag.data(), tag.size());
  gpu::DeviceBuffer buffer = memory.allocate(stream(), kTagBytes + 4, "checkpoint tag");
  stream().copy(buffer.data(), text.data(), kTagBytes, gpu::CopyKind::host_to_device);
  comm.broadcast(stream(), buffer.data(), kTagBytes, gpu::DataType::uint8, 0);
  stream().copy(text.data(), buffer.data(), kTagBytes, gpu::CopyKind::device_to_host);
  stream().synchronize();
  const std::string leader_tag(text.data());
  float differs = leader_tag == tag ? 0.0f : 1.0f;
  float* flag = reinterpret_cast<float*>(buffer.as<std::byte>() + kTagBytes);
  stream().copy(flag, &differs, 4, gpu::CopyKind::host_to_device);
  comm.all_reduce(stream(), flag, 1, gpu::DataType::float32, gpu::ReduceOp::max);
  stream().copy(&differs, flag, 4, gpu::CopyKind::device_to_host);
  stream().synchronize();
  if (differs == 0.0f) return tag;
  using Validation = CheckpointConfig::TagValidation;
  if (config.checkpoint.tag_validation == Validation::fail) {
    throw UserError(fmt::format("the ranks asked to save under different tags (rank 0: \"{}\", "
                                "this rank: \"{}\")",
                                leader_tag, tag),
                    "pass every rank the same tag, or set checkpoint.tag_validation to Warn", 2);
  }
  if (config.checkpoint.tag_validation == Validation::warn && comm.rank() == 0) {
    base::logger("checkpoint")
        .warn(
            "the ranks asked to save under different tags; every rank "
            "saves under rank 0's \"{}\"",
            leader_tag);
  }
  return leader_tag;
}

// Each rank's file sizes and CRC32Cs, gathered on every rank (-1 bytes: that rank failed).
std::vector<std::int64_t> Engine::State::gather_file_records(const std::vector<ManifestFile>& files,
                                                             bool failed) {
  std::vector<std::int64_t> mine(kFileRecords, 0);
  for (std::size_t f = 0; f < files.size(); ++f) {
    mine[2 * f] = files[f].bytes;
    mine[2 * f + 1] = files[f].crc32c;
  }
  if (failed) mine[0] = -1;
  gpu::Comm& comm = runtime.comm;
  if (comm.world_size() == 1) return mine;
  const int world = comm.world_size();
  std::vector<std::int64_t> all(static_cast<std::size_t>(world * kFileRecords));
  gpu::DeviceBuffer gathered =
      memory.allocate(stream(), world * kFileRecords * 8, "checkpoint records");
  std::int64_t* slot = gathered.as<std::int64_t>() + comm.rank() * kFileRecords;
  stream().copy(slot, mine.data(), kFileRecords * 8, gpu::CopyKind::host_to_device);
  comm.all_gather(stream(), slot, gathered.data(), kFileRecords, gpu::DataType::int64);
  stream().copy(all.data(), gathered.data(), gathered.bytes(), gpu::CopyKind::device_to_host);
  stream().synchronize();
  for (int r = 0; r < world; ++r) {
    if (all[static_cast<std::size_t>(r * kFileRecords)] == -1 && !failed) {
      throw UserError(fmt::format("rank {} could not write its share of the checkpoint", r),
                      fmt::format("fix what rank {}'s error names, then save again", r), 1);
    }
  }
  return all;
}

std::vector<ManifestFile> Engine::State::files_from_records(
    const std::vector<std::int64_t>& records) const {
  std::vector<ManifestFile> files;
  const std::vector<std::string> states = state_names();
  for (int r = 0; r < layout.world_size(); ++r) {
    for (std::size_t f = 0; f < states.size(); ++f) {
      const std::size_t at = static_cast<std::size_t>(r * kFileRecords) + 2 * f;
      files.push_back({checkpoint::state_file_name(states[f], r), states[f], r, records[at],
                       static_cast<std::uint32_t>(records[at + 1])});
    }
  }
  return files;
}

// This rank's partition, state by state, from CPU or NVMe (sub-group by sub-group) or from the
// device (chunk by chunk through host memory).
std::vector<ManifestFile> Engine::State::write_states(const fs::path& directory) {
  aio::Engine io = checkpoint_io(config, runtime.faults.checkpoint);
  checkpoint::ShardWriter writer(io, directory, checkpoint::shard_pieces(layout, shard_rank()),
                                 shard_rank(), layout.world_size(), state_names());
  if (offload) {
    offload->visit_states([&](const zero::OptimizerOffload::SubGroupStates& states) {
      writer.write(states.range, kept_states(states));
    });
    return writer.finish();
  }
  const std::array<const gpu::DeviceBuffer*, 3> buffers = {&master, &exp_avg, &exp_avg_sq};
  std::vector<std::vector<float>> host;
  const std::int64_t n = layout.partition_numel();
  for (std::int64_t begin = 0; begin < n; begin += kDeviceStateChunk) {
    const zero::Range range{begin, std::min(n, begin + kDeviceStateChunk)};
    std::vector<std::span<const float>> values;
    host.resize(buffers.size());
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      if (!*buffers[b]) continue;
      host[b].resize(static_cast<std::size_t>(range.size()));
      stream().copy(host[b].data(), buffers[b]->as<float>() + begin, range.size() * 4,
                    gpu::CopyKind::device_to_host);
      values.emplace_back(host[b]);
    }
    stream().synchronize();
    writer.write(range, values);
  }
  return writer.finish();
}

void Engine::plan_checkpoint(const fs::path& dir, const std::string& tag) {
  State& s = *state_;
  s.check_usable();
  const auto started = std::chrono::steady_clock::now();
  s.planned_save.reset();
  // Only a step that reads every state from swap saves a read by taking the save along; one
  // overlapped with backward may still undo the sub-groups it stepped.
  if (!s.offload || s.offload->store() == nullptr || s.overlap) return;
  s.stream().synchronize();
  gpu::Comm& comm = s.runtime.comm;
  const std::string agreed = s.agree_on_tag(tag);
  if (comm.rank() == 0) checkpoint::begin_save(dir, agreed);
  comm.barrier();
  auto planned = std::make_unique<PlannedSave>(dir, agreed, s.config, s.runtime.faults.checkpoint);
  planned->batches = s.batches_trained;
  if (comm.rank() < s.layout.world_size()) {
    try {
      planned->writer.emplace(planned->io, checkpoint::partial_directory(dir, agreed),
                              checkpoint::shard_pieces(s.layout, s.shard_rank()), s.shard_rank(),
                              s.layout.world_size(), s.state_names());
    } catch (...) {
      planned->failure = std::current_exception();  // save_checkpoint reports it
    }
  }
  planned->plan_seconds = seconds_since(started);
  s.planned_save = std::move(planned);
}

CheckpointInfo Engine::save_checkpoint(const fs::path& dir, const std::string& tag) {
  State& s = *state_;
  s.check_usable();
  s.settle_step();
  const auto started = std::chrono::steady_clock::now();
  s.stream().synchronize();
  gpu::Comm& comm = s.runtime.comm;
  const bool leader = comm.rank() == 0;
  const std::string agreed = s.agree_on_tag(tag);
  // The step just taken wrote its states into the planned save (the same on every rank): only
  // the files' ends are left. Otherwise a plan is dropped, its partial files with it.
  std::unique_ptr<PlannedSave> planned = std::move(s.planned_save);
  const bool during_step = planned && planned->dir == dir && planned->tag == agreed &&
                           planned->step == s.steps_taken &&
                           planned->batches + 1 == s.batches_trained;
  const double plan_seconds = during_step ? planned->plan_seconds : 0.0;
  if (!during_step) {
    planned.reset();
    if (leader) checkpoint::begin_save(dir, agreed);
    comm.barrier();
  }

  // Every rank reports, failed or not, so that no rank waits for one that stopped.
  const fs::path partial = checkpoint::partial_directory(dir, agreed);
  std::vector<ManifestFile> files;
  std::exception_ptr failure;
  if (comm.rank() < s.layout.world_size()) {
    try {
      if (!during_step) {
        files = s.write_states(partial);
      } else if (planned->failure) {
        std::rethrow_exception(planned->failure);
      } else {
        files = planned->writer->finish();
      }
    } catch (...) {
      failure = std::current_exception();
    }
  }
  planned.reset();
  std::vector<std::int64_t> records = s.gather_file_records(files, failure != nullptr);
  if (failure) std::rethrow_exception(failure);

  CheckpointInfo info;
  info.path = dir / agreed;
  info.step = s.steps_taken;
  info.batches = s.batches_trained;
  info.during_step = during_step;
  for (const ManifestFile& file : files)
    info.bytes += file.bytes;
  if (leader) {
    checkpoint::Manifest manifest = s.manifest_for(agreed);
    manifest.files = s.files_from_records(records);
    checkpoint::write_manifest(partial, manifest);
    checkpoint::publish(dir, agreed);
    info.pruned = checkpoint::prune(dir, s.config.checkpoint.keep_last);
  }
  comm.barrier();  // no rank goes on before the checkpoint is in place
  s.last_checkpoint = info.path;
  info.seconds = plan_seconds + seconds_since(started);
  return info;
}

CheckpointInfo Engine::load_checkpoint(const fs::path& dir, const std::string& tag) {
  State& s = *state_;
  s.check_usable();
  s.settle_step();
  const auto started = std::chrono::steady_clock::now();
  s.stream().synchronize();
  if (!tag.empty()) checkpoint::check_tag(tag);
  const fs::path where = checkpoint::resolve_checkpoint(tag.empty() ? dir : dir / tag);
  // Everything that can be judged without reading the states is, before anything changes: the
  // manifest, every file's presence, size and header, the model and the optimizer.
  const auto reader = std::make_shared<const checkpoint::ShardReader>(where);
  const checkpoint::Manifest& manifest = reader->manifest();
  reader->check_model(s.layout.all_tensors());
  const std::string optimizer = to_string(s.config.optimizer.type);
  if (manifest.optimizer != optimizer) {
    throw UserError(
        fmt::format("{}: the checkpoint holds {} states, but the config's optimizer "
                    "is {}",
                    (where / checkpoint::kManifestName).string(), manifest.optimizer, optimizer),
        fmt::format("set optimizer.type to {} to resume this run, or start a new run "
                    "without --resume",
                    manifest.optimizer),
        2);
  }
  CheckpointInfo info;
  try {
    info.bytes = s.read_states(reader);
    info.during_step = s.offload && s.offload->fills_later();
    if (info.during_step) s.unverified_load = where;
  } catch (const std::exception& error) {
    // The states are partly the checkpoint's now: this engine must not train on them.
    s.unusable = fmt::format("loading {} failed part way: {}", where.string(), error.what());
    throw UserError(s.unusable, fix_of(error, "check the disk, then load it into a new run"), 1);
  }
  s.steps_taken = manifest.step;
  s.batches_trained = manifest.batches;
  if (s.config.fp16.enabled && manifest.precision == "fp16")
    s.loss_scaler.restore(manifest.loss_scaler);
  if (manifest.seed != s.config.strata.seed && s.runtime.comm.rank() == 0) {
    base::logger("checkpoint")
        .warn(
            "{} was saved by a run with strata.seed {}, this run's is {}: the batches from here on "
            "are not the ones the saved run would have trained (set strata.seed to {} to continue "
            "its "
            "data order)",
            where.string(), manifest.seed, s.config.strata.seed, manifest.seed);
  }
  s.last_checkpoint = where;
  info.path = where;
  info.step = manifest.step;
  info.batches = manifest.batches;
  info.seconds = seconds_since(started);
  return info;
}

// The new partition's states, piece by piece, each file read once and its CRC32C checked at the
// end; the parameter tier is made from the masters. Returns the bytes read.
//
// With the optimizer states on NVMe only the masters are read now, for the parameter tier: the
// optimizer's states are read again by the first step, where it would have read them from swap
// (OptimizerOffload::fill_states_later), so that they reach the swap file once, stepped, instead
// of being written now and read back at once.
std::int64_t Engine::State::read_states(std::shared_ptr<const checkpoint::ShardReader> reader) {
  std::vector<checkpoint::Piece> pieces = checkpoint::shard_pieces(layout, shard_rank());
  if (offload && offload->store() != nullptr && !overlap) {
    std::int64_t bytes = 0;
    {
      aio::Engine io = checkpoint_io(config, runtime.faults.checkpoint);
      checkpoint::StateStream masters(io, *reader, checkpoint::kMasterState);
      checkpoint::PieceCursor cursor(pieces);
      const std::int64_t element = gpu::size_bytes(storage);
      std::vector<float> chunk(static_cast<std::size_t>(kDeviceStateChunk));
      for (const zero::Range& sub_group : offload->sub_groups()) {
        std::span<std::byte> shards = tier->values(sub_group);
        for (std::int64_t begin = sub_group.begin; begin < sub_group.end;
             begin += kDeviceStateChunk) {
          const zero::Range range{begin, std::min(sub_group.end, begin + kDeviceStateChunk)};
          std::span<float> values = std::span(chunk).first(static_cast<std::size_t>(range.size()));
          fill_range(masters, cursor, range, values);
          to_storage(copy_type, values, shards.data() + (begin - sub_group.begin) * element);
        }
        tier->commit(sub_group);
      }
      masters.finish();
      bytes = masters.bytes_read();
    }
    coordinator->invalidate();
    auto later = std::make_shared<LaterLoad>(std::move(reader), config, runtime.faults.checkpoint,
                                             std::move(pieces), state_names());
    offload->fill_states_later(
        [later](const zero::OptimizerOffload::SubGroupStates& states) { later->fill(states); },
        [this, later] {
          later->finish();
          unverified_load.clear();
        });
    return bytes;
  }
  aio::Engine io = checkpoint_io(config, runtime.faults.checkpoint);
  std::map<std::string, std::unique_ptr<checkpoint::StateStream>> streams;
  std::map<std::string, checkpoint::PieceCursor> cursors;
  for (const std::string& name : state_names()) {
    streams.emplace(name, std::make_unique<checkpoint::StateStream>(io, *reader, name));
    cursors.emplace(name, checkpoint::PieceCursor(pieces));
  }
  load_states([&](const std::string& state, zero::Range range, std::span<float> out) {
    fill_range(*streams.at(state), cursors.at(state), range, out);
  });
  std::int64_t bytes = 0;
  for (auto& [name, stream] : streams) {
    stream->finish();
    bytes += stream->bytes_read();
  }
  return bytes;
}

}  // namespace strata::engine
