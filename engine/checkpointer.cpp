#include "engine/checkpointer.h"

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
#include "engine/checkpoint/shard_pieces.h"
#include "engine/checkpoint/shard_writer.h"
#include "engine/checkpoint/state_stream.h"
#include "engine/initial_states.h"
#include "engine/param_storage.h"
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
std::vector<std::span<const float>> kept_states(const OptimizerStep::States& states) {
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

// The optimizer states a load leaves to the first step (OptimizerStates::fill_states_later):
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

  void fill(const OptimizerStep::States& states) {
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

// A checkpoint the next step saves while its optimizer steps the states (Checkpointer::plan):
// each sub-group goes to the checkpoint's files from the memory it was stepped in, so states on
// NVMe are not read from swap a second time for the save.
struct PlannedSave {
  // The save's own aio engine, as save()'s (the run's aio settings and the faults a test planted
  // for checkpoints).
  PlannedSave(fs::path dir_in, std::string tag_in, const Config& config,
              const aio::FaultPlan& faults);

  fs::path dir;
  std::string tag;  // as every rank agreed on it
  aio::Engine io;
  std::optional<checkpoint::ShardWriter> writer;  // on ranks that hold a shard
  // The step that may make it: the one that trains batch `batches` + 1 (batches_trained when
  // planned). Once it stepped every sub-group into the writer, `step` is its steps_taken.
  std::int64_t batches = 0;
  std::int64_t step = -1;
  // The checkpoint disk's error (the step itself goes on: its states are intact).
  std::exception_ptr failure;
  double plan_seconds = 0;  // plan()'s own time (the files created and allocated)

  // Writes one stepped sub-group; an error is kept for save() and ends the writing.
  void write(const OptimizerStep::States& states) noexcept;
};

PlannedSave::PlannedSave(fs::path dir_in, std::string tag_in, const Config& config,
                         const aio::FaultPlan& faults)
    : dir(std::move(dir_in)), tag(std::move(tag_in)), io(checkpoint_io(config, faults)) {}

void PlannedSave::write(const OptimizerStep::States& states) noexcept {
  if (!writer) return;
  try {
    writer->write(states.range, kept_states(states));
  } catch (...) {
    failure = std::current_exception();
    writer.reset();  // its partial files are removed
  }
}

Checkpointer::Checkpointer(CheckpointParts parts) : parts_(parts) {}

Checkpointer::~Checkpointer() = default;

int Checkpointer::shard_rank() const {
  return parts_.layout.world_size() > 1 ? parts_.runtime.comm.rank() : 0;
}

OptimizerStep::StatesVisitor Checkpointer::planned_writer() {
  if (!planned_save_ || planned_save_->batches != parts_.record.batches_trained ||
      planned_save_->step >= 0)
    return {};
  return [save = planned_save_.get()](const OptimizerStep::States& states) { save->write(states); };
}

void Checkpointer::planned_step_taken(std::int64_t step) {
  STRATA_ASSERT(planned_save_ != nullptr);
  planned_save_->step = step;
}

std::string Checkpointer::resume_advice() const {
  if (!last_checkpoint_.empty()) {
    return fmt::format("resume from the last checkpoint: strata train --resume {}",
                       last_checkpoint_.parent_path().string());
  }
  if (!parts_.config.checkpoint.dir.empty()) {
    return fmt::format("restart the run: it has saved no checkpoint into {} yet",
                       parts_.config.checkpoint.dir);
  }
  return "restart the run: it saves no checkpoints (set strata.checkpoint.dir or strata train "
         "--save-dir DIR --save-every N to have one to resume from)";
}

std::vector<std::string> Checkpointer::state_names() const {
  std::vector<std::string> names = {checkpoint::kMasterState};
  if (parts_.config.optimizer.type != OptimizerType::adagrad)
    names.emplace_back(checkpoint::kExpAvgState);
  if (parts_.config.optimizer.type != OptimizerType::lion)
    names.emplace_back(checkpoint::kExpAvgSqState);
  return names;
}

checkpoint::Manifest Checkpointer::manifest_for(const std::string& tag) const {
  const Config& config = parts_.config;
  checkpoint::Manifest m;
  m.tag = tag;
  m.step = parts_.record.steps_taken;
  m.batches = parts_.record.batches_trained;
  m.seed = config.strata.seed;
  m.world_size = parts_.runtime.comm.world_size();
  m.shard_ranks = parts_.layout.world_size();
  m.stage = config.zero.stage;
  m.offload_param = to_string(config.zero.offload_param.device);
  m.offload_optimizer = to_string(config.zero.offload_optimizer.device);
  m.optimizer = to_string(config.optimizer.type);
  m.precision = precision_of(config);
  m.loss_scaler = parts_.loss_scaler.state();
  m.config = to_json(config);
  if (!config.strata.model.hf_config.empty()) {
    // Read at start-up by the model; a file changed since is the user's to answer for.
    std::ifstream in(config.strata.model.hf_config);
    m.model_config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (m.model_config.is_discarded()) m.model_config = nullptr;
  }
  for (const zero::TensorSlot& slot : parts_.layout.all_tensors())
    m.tensors.push_back({slot.name, slot.shape, slot.unpadded_rows});
  m.states = state_names();
  return m;
}

std::string Checkpointer::agree_on_tag(const std::string& tag) {
  checkpoint::check_tag(tag);
  if (static_cast<std::int64_t>(tag.size()) >= kTagBytes) {
    throw UserError(fmt::format("checkpoint tag \"{}\" is {} bytes long", tag, tag.size()),
                    fmt::format("use a tag shorter than {} bytes", kTagBytes), 2);
  }
  gpu::Comm& comm = parts_.runtime.comm;
  if (comm.world_size() == 1) return tag;
  std::array<char, kTagBytes> text{};
  std::memcpy(text.data(), tag.data(), tag.size());
  gpu::DeviceBuffer buffer = parts_.memory.allocate(stream(), kTagBytes + 4, "checkpoint tag");
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
  if (parts_.config.checkpoint.tag_validation == Validation::fail) {
    throw UserError(fmt::format("the ranks asked to save under different tags (rank 0: \"{}\", "
                                "this rank: \"{}\")",
                                leader_tag, tag),
                    "pass every rank the same tag, or set checkpoint.tag_validation to Warn", 2);
  }
  if (parts_.config.checkpoint.tag_validation == Validation::warn && comm.rank() == 0) {
    base::logger("checkpoint")
        .warn(
            "the ranks asked to save under different tags; every rank "
            "saves under rank 0's \"{}\"",
            leader_tag);
  }
  return leader_tag;
}

std::vector<std::int64_t> Checkpointer::gather_file_records(const std::vector<ManifestFile>& files,
                                                            bool failed) {
  std::vector<std::int64_t> mine(kFileRecords, 0);
  for (std::size_t f = 0; f < files.size(); ++f) {
    mine[2 * f] = files[f].bytes;
    mine[2 * f + 1] = files[f].crc32c;
  }
  if (failed) mine[0] = -1;
  gpu::Comm& comm = parts_.runtime.comm;
  if (comm.world_size() == 1) return mine;
  const int world = comm.world_size();
  std::vector<std::int64_t> all(static_cast<std::size_t>(world * kFileRecords));
  gpu::DeviceBuffer gathered =
      parts_.memory.allocate(stream(), world * kFileRecords * 8, "checkpoint records");
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

std::vector<ManifestFile> Checkpointer::files_from_records(
    const std::vector<std::int64_t>& records) const {
  std::vector<ManifestFile> files;
  const std::vector<std::string> states = state_names();
  for (int r = 0; r < parts_.layout.world_size(); ++r) {
    for (std::size_t f = 0; f < states.size(); ++f) {
      const std::size_t at = static_cast<std::size_t>(r * kFileRecords) + 2 * f;
      files.push_back({checkpoint::state_file_name(states[f], r), states[f], r, records[at],
                       static_cast<std::uint32_t>(records[at + 1])});
    }
  }
  return files;
}

// This rank's partition, state by state, range by range from whichever tier holds it.
std::vector<ManifestFile> Checkpointer::write_states(const fs::path& directory) {
  aio::Engine io = checkpoint_io(parts_.config, parts_.runtime.faults.checkpoint);
  checkpoint::ShardWriter writer(io, directory,
                                 checkpoint::shard_pieces(parts_.layout, shard_rank()),
                                 shard_rank(), parts_.layout.world_size(), state_names());
  parts_.optimizer.visit_states([&](const OptimizerStep::States& states) {
    writer.write(states.range, kept_states(states));
  });
  return writer.finish();
}

void Checkpointer::plan(const fs::path& dir, const std::string& tag) {
  const auto started = std::chrono::steady_clock::now();
  planned_save_.reset();
  // Only a step that reads every state from swap saves a read by taking the save along; one
  // overlapped with backward may still undo the sub-groups it stepped.
  if (!parts_.optimizer.streams_states()) return;
  stream().synchronize();
  gpu::Comm& comm = parts_.runtime.comm;
  const std::string agreed = agree_on_tag(tag);
  if (comm.rank() == 0) checkpoint::begin_save(dir, agreed);
  comm.barrier();
  auto planned =
      std::make_unique<PlannedSave>(dir, agreed, parts_.config, parts_.runtime.faults.checkpoint);
  planned->batches = parts_.record.batches_trained;
  if (comm.rank() < parts_.layout.world_size()) {
    try {
      planned->writer.emplace(planned->io, checkpoint::partial_directory(dir, agreed),
                              checkpoint::shard_pieces(parts_.layout, shard_rank()), shard_rank(),
                              parts_.layout.world_size(), state_names());
    } catch (...) {
      planned->failure = std::current_exception();  // save_checkpoint reports it
    }
  }
  planned->plan_seconds = seconds_since(started);
  planned_save_ = std::move(planned);
}

CheckpointInfo Checkpointer::save(const fs::path& dir, const std::string& tag) {
  RunRecord& record = parts_.record;
  const auto started = std::chrono::steady_clock::now();
  stream().synchronize();
  gpu::Comm& comm = parts_.runtime.comm;
  const bool leader = comm.rank() == 0;
  const std::string agreed = agree_on_tag(tag);
  // The step just taken wrote its states into the planned save (the same on every rank): only
  // the files' ends are left. Otherwise a plan is dropped, its partial files with it.
  std::unique_ptr<PlannedSave> planned = std::move(planned_save_);
  const bool during_step = planned && planned->dir == dir && planned->tag == agreed &&
                           planned->step == record.steps_taken &&
                           planned->batches + 1 == record.batches_trained;
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
  if (comm.rank() < parts_.layout.world_size()) {
    try {
      if (!during_step) {
        files = write_states(partial);
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
  std::vector<std::int64_t> records = gather_file_records(files, failure != nullptr);
  if (failure) std::rethrow_exception(failure);

  CheckpointInfo info;
  info.path = dir / agreed;
  info.step = record.steps_taken;
  info.batches = record.batches_trained;
  info.during_step = during_step;
  for (const ManifestFile& file : files)
    info.bytes += file.bytes;
  if (leader) {
    checkpoint::Manifest manifest = manifest_for(agreed);
    manifest.files = files_from_records(records);
    checkpoint::write_manifest(partial, manifest);
    checkpoint::publish(dir, agreed);
    info.pruned = checkpoint::prune(dir, parts_.config.checkpoint.keep_last);
  }
  comm.barrier();  // no rank goes on before the checkpoint is in place
  last_checkpoint_ = info.path;
  info.seconds = plan_seconds + seconds_since(started);
  return info;
}

void Checkpointer::check_optimizer(const checkpoint::Manifest& manifest,
                                   const fs::path& where) const {
  const std::string optimizer = to_string(parts_.config.optimizer.type);
  if (manifest.optimizer == optimizer) return;
  throw UserError(
      fmt::format("{}: the checkpoint holds {} states, but the config's optimizer "
                  "is {}",
                  (where / checkpoint::kManifestName).string(), manifest.optimizer, optimizer),
      fmt::format("set optimizer.type to {} to resume this run, or start a new run "
                  "without --resume",
                  manifest.optimizer),
      2);
}

CheckpointInfo Checkpointer::load(const fs::path& dir, const std::string& tag) {
  const auto started = std::chrono::steady_clock::now();
  stream().synchronize();
  if (!tag.empty()) checkpoint::check_tag(tag);
  const fs::path where = checkpoint::resolve_checkpoint(tag.empty() ? dir : dir / tag);
  // Everything that can be judged without reading the states is, before anything changes: the
  // manifest, every file's presence, size and header, the model and the optimizer.
  const auto reader = std::make_shared<const checkpoint::ShardReader>(where);
  const checkpoint::Manifest& manifest = reader->manifest();
  reader->check_model(parts_.layout.all_tensors());
  check_optimizer(manifest, where);
  CheckpointInfo info;
  RunRecord& record = parts_.record;
  try {
    info.bytes = read_states(reader);
    info.during_step = parts_.optimizer.fills_later();
    if (info.during_step) unverified_load_ = where;
  } catch (const std::exception& error) {
    // The states are partly the checkpoint's now: this engine must not train on them.
    record.unusable.fail(
        fmt::format("loading {} failed part way: {}", where.string(), error.what()));
    throw UserError(record.unusable.cause(),
                    fix_of(error, "check the disk, then load it into a new run"), 1);
  }
  record.steps_taken = manifest.step;
  record.batches_trained = manifest.batches;
  const Config& config = parts_.config;
  if (config.fp16.enabled && manifest.precision == "fp16")
    parts_.loss_scaler.restore(manifest.loss_scaler);
  if (manifest.seed != config.strata.seed && parts_.runtime.comm.rank() == 0) {
    base::logger("checkpoint")
        .warn(
            "{} was saved by a run with strata.seed {}, this run's is {}: the batches from here on "
            "are not the ones the saved run would have trained (set strata.seed to {} to continue "
            "its "
            "data order)",
            where.string(), manifest.seed, config.strata.seed, manifest.seed);
  }
  last_checkpoint_ = where;
  info.path = where;
  info.step = manifest.step;
  info.batches = manifest.batches;
  info.seconds = seconds_since(started);
  return info;
}

// With the optimizer states on NVMe only the masters are read now, for the parameter tier: the
// optimizer's states are read again by the first step, where it would have read them from swap
// (OptimizerStep::fill_states_later), so that they reach the swap file once, stepped, instead
// of being written now and read back at once.
std::int64_t Checkpointer::read_masters_leave_states(
    std::shared_ptr<const checkpoint::ShardReader> reader) {
  std::vector<checkpoint::Piece> pieces = checkpoint::shard_pieces(parts_.layout, shard_rank());
  std::int64_t bytes = 0;
  {
    aio::Engine io = checkpoint_io(parts_.config, parts_.runtime.faults.checkpoint);
    checkpoint::StateStream masters(io, *reader, checkpoint::kMasterState);
    checkpoint::PieceCursor cursor(pieces);
    const std::int64_t element = gpu::size_bytes(to_data_type(parts_.copy_type));
    std::vector<float> chunk(static_cast<std::size_t>(kStateChunk));
    for (const zero::Range& sub_group : parts_.optimizer.sub_groups()) {
      std::span<std::byte> shards = parts_.tier.values(sub_group);
      for (std::int64_t begin = sub_group.begin; begin < sub_group.end; begin += kStateChunk) {
        const zero::Range range{begin, std::min(sub_group.end, begin + kStateChunk)};
        std::span<float> values = std::span(chunk).first(static_cast<std::size_t>(range.size()));
        fill_range(masters, cursor, range, values);
        to_storage(parts_.copy_type, values, shards.data() + (begin - sub_group.begin) * element);
      }
      parts_.tier.commit(sub_group);
    }
    masters.finish();
    bytes = masters.bytes_read();
  }
  parts_.coordinator.invalidate();
  auto later = std::make_shared<LaterLoad>(std::move(reader), parts_.config,
                                           parts_.runtime.faults.checkpoint, std::move(pieces),
                                           state_names());
  parts_.optimizer.fill_states_later(
      [later](const OptimizerStep::States& states) { later->fill(states); },
      [this, later] {
        later->finish();
        unverified_load_.clear();
      });
  return bytes;
}

// The new partition's states, piece by piece, each file read once and its CRC32C checked at the
// end; the parameter tier is made from the masters. Returns the bytes read.
std::int64_t Checkpointer::read_states(std::shared_ptr<const checkpoint::ShardReader> reader) {
  if (parts_.optimizer.streams_states()) return read_masters_leave_states(std::move(reader));
  const std::vector<checkpoint::Piece> pieces =
      checkpoint::shard_pieces(parts_.layout, shard_rank());
  aio::Engine io = checkpoint_io(parts_.config, parts_.runtime.faults.checkpoint);
  std::map<std::string, std::unique_ptr<checkpoint::StateStream>> streams;
  std::map<std::string, checkpoint::PieceCursor> cursors;
  for (const std::string& name : state_names()) {
    streams.emplace(name, std::make_unique<checkpoint::StateStream>(io, *reader, name));
    cursors.emplace(name, checkpoint::PieceCursor(pieces));
  }
  fill_states_from(parts_.optimizer,
                   [&](const std::string& state, zero::Range range, std::span<float> out) {
                     fill_range(*streams.at(state), cursors.at(state), range, out);
                   });
  parts_.coordinator.invalidate();
  std::int64_t bytes = 0;
  for (auto& [name, stream] : streams) {
    stream->finish();
    bytes += stream->bytes_read();
  }
  return bytes;
}

}  // namespace strata::engine
