// strata ckpt: look into a checkpoint and take the model out of it.
//   strata ckpt inspect D[/TAG] [--verify] [--json]   what the run was, its files, their CRC32C
//   strata ckpt export D[/TAG] --out F.safetensors [--dtype fp32|bf16|fp16]
//   strata ckpt export D[/TAG] --hf DIR [--dtype ...] [--max-shard-size 5GiB]   (ckpt_hf.cpp)
// Export writes the whole model under its own parameter names, one tensor at a time through a
// few buffers, whatever the model's size; any stage, offload or world size saved it.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "aio/engine.h"
#include "base/error.h"
#include "base/units.h"
#include "cpu_adam/half.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/save_directory.h"
#include "engine/checkpoint/shard_reader.h"
#include "engine/checkpoint/state_stream.h"
#include "tools/ckpt_export.h"
#include "tools/commands.h"

namespace strata::tools {
namespace {

namespace ckpt = engine::checkpoint;

struct InspectOptions {
  std::string path;
  bool verify = false;
  bool json = false;
};

struct ExportOptions {
  std::string path;
  std::string out;
  std::string dtype = "fp32";
};

void print_manifest(const std::filesystem::path& where, const ckpt::Manifest& m) {
  fmt::print("checkpoint {}\n", where.string());
  fmt::print("  tag        {} (format {})\n", m.tag, m.format);
  fmt::print("  step       {} optimizer steps, {} batches trained (the next is {})\n", m.step,
             m.batches, m.batches + 1);
  fmt::print("  run        {} rank(s), ZeRO stage {}, states written by {} rank(s)\n", m.world_size,
             m.stage, m.shard_ranks);
  fmt::print("  tiers      parameters {}, optimizer states {}\n", m.offload_param,
             m.offload_optimizer);
  fmt::print("  optimizer  {} ({}), precision {}, seed {}\n", m.optimizer,
             fmt::join(m.states, ", "), m.precision, m.seed);
  if (m.precision == "fp16")
    fmt::print("  loss scale {} ({} steps skipped)\n", m.loss_scaler.scale,
               m.loss_scaler.skipped_steps);
  const auto model = m.config.find("strata");
  if (model != m.config.end() && model->contains("model"))
    fmt::print("  model      {} parameters in {} tensors, strata.model {}\n",
               base::format_count(static_cast<double>(m.parameter_count())), m.tensors.size(),
               (*model)["model"].dump());
  fmt::print("  files      {} files, {}\n", m.files.size(),
             base::format_bytes(static_cast<double>(m.total_bytes())));
  for (const ckpt::ManifestFile& file : m.files)
    fmt::print("    {:<36} {:>14} bytes  crc32c {:08x}\n", file.name, file.bytes, file.crc32c);
}

int inspect(const InspectOptions& options) {
  const std::filesystem::path where = ckpt::resolve_checkpoint(options.path);
  const ckpt::Manifest manifest = ckpt::read_manifest(where);
  std::int64_t verified = -1;
  if (options.verify) {
    aio::Engine io = checkpoint_io();
    verified = ckpt::verify_files(io, ckpt::ShardReader(where));
  }
  if (options.json) {
    nlohmann::json out = {{"path", where.string()}, {"manifest", ckpt::to_json(manifest)}};
    if (options.verify) out["verified_bytes"] = verified;
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  print_manifest(where, manifest);
  if (options.verify) {
    fmt::print("verified: every file's size and CRC32C match the manifest ({})\n",
               base::format_bytes(static_cast<double>(verified)));
  }
  return 0;
}

// The master weights stream from the checkpoint's files in flat order, which is the order of
// the model's tensors, so each file is read once, front to back, and verified as it passes; the
// output is removed when a file turns out damaged.
int export_weights(const ExportOptions& options) {
  const ckpt::Dtype dtype = export_dtype(options.dtype);
  const std::filesystem::path where = ckpt::resolve_checkpoint(options.path);
  const ckpt::ShardReader reader(where);
  const ckpt::Manifest& m = reader.manifest();
  std::vector<ckpt::SafetensorsWriter::Tensor> tensors;
  for (const ckpt::ManifestTensor& tensor : m.tensors)
    tensors.push_back({tensor.name, dtype, tensor.shape});
  aio::Engine io = checkpoint_io();
  ckpt::StateStream masters(io, reader, ckpt::kMasterState);
  ckpt::SafetensorsWriter writer(
      io, options.out, tensors,
      {{"format", "pt"}, {"strata_checkpoint", m.tag}, {"step", std::to_string(m.step)}});
  std::vector<float> chunk(static_cast<std::size_t>(kExportChunk));
  std::vector<std::uint16_t> half;
  for (const ckpt::ManifestTensor& tensor : m.tensors) {
    for (std::int64_t at = 0; at < tensor.numel(); at += kExportChunk) {
      const auto count = static_cast<std::size_t>(std::min(kExportChunk, tensor.numel() - at));
      std::span<float> values = std::span(chunk).first(count);
      masters.read(tensor.name, at, values);
      append_as(writer, dtype, values, half);
    }
  }
  masters.finish();  // before finish(): a damaged checkpoint leaves no output behind
  const ckpt::WrittenFile written = writer.finish();
  fmt::print("exported {} parameters ({} tensors, {}) of {} at step {} to {}: {}\n",
             base::format_count(static_cast<double>(m.parameter_count())), m.tensors.size(),
             options.dtype, where.string(), m.step, options.out,
             base::format_bytes(static_cast<double>(written.bytes)));
  return 0;
}

}  // namespace

aio::Engine checkpoint_io() {
  aio::EngineOptions options;
  options.verify_checksums = false;
  return aio::Engine(options);
}

ckpt::Dtype export_dtype(const std::string& name) {
  if (name == "fp32") return ckpt::Dtype::f32;
  if (name == "bf16") return ckpt::Dtype::bf16;
  if (name == "fp16") return ckpt::Dtype::f16;
  throw UserError(fmt::format("--dtype {} is not one export writes", name),
                  "pass --dtype fp32, bf16 or fp16", 2);
}

void append_as(ckpt::SafetensorsWriter& writer, ckpt::Dtype dtype, std::span<const float> values,
               std::vector<std::uint16_t>& half) {
  if (dtype == ckpt::Dtype::f32) {
    writer.append(std::as_bytes(values));
    return;
  }
  half.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    half[i] = dtype == ckpt::Dtype::bf16 ? cpu_adam::to_bf16(values[i]).bits
                                         : cpu_adam::to_fp16(values[i]).bits;
  writer.append(std::as_bytes(std::span(half)));
}

void add_ckpt_command(CLI::App& app, CommandContext& context) {
  auto* ckpt_command = app.add_subcommand("ckpt", "Inspect, verify and export checkpoints");
  ckpt_command->require_subcommand(1);

  auto inspect_options = std::make_shared<InspectOptions>();
  auto* inspect_command = ckpt_command->add_subcommand(
      "inspect", "Step, run, tiers and files of a checkpoint (a save directory: its latest)");
  inspect_command->add_option("path", inspect_options->path, "Save directory or DIR/TAG")
      ->required();
  inspect_command->add_flag("--verify", inspect_options->verify,
                            "Check every file's size and CRC32C; exit 1 naming the first bad one");
  inspect_command->add_flag("--json", inspect_options->json, "Print the manifest as JSON");
  inspect_command->callback(
      [inspect_options, &context] { context.exit_status = inspect(*inspect_options); });

  auto export_options = std::make_shared<ExportOptions>();
  auto hf_options = std::make_shared<HfExportOptions>();
  auto shard_size = std::make_shared<std::string>("5GiB");
  auto* export_command = ckpt_command->add_subcommand(
      "export",
      "The whole model's weights, written streaming: one safetensors file (--out) or a Hugging "
      "Face folder (--hf)");
  export_command->add_option("path", export_options->path, "Save directory or DIR/TAG")->required();
  auto* out = export_command->add_option("--out", export_options->out,
                                         "The .safetensors file to write (strata's names)");
  auto* hf = export_command->add_option(
      "--hf", hf_options->out_dir,
      "A folder to write as Hugging Face's save_pretrained does: config.json and "
      "model.safetensors (sharded with an index past --max-shard-size)");
  out->excludes(hf);
  export_command->add_option("--dtype", export_options->dtype, "fp32, bf16 or fp16")
      ->capture_default_str();
  export_command
      ->add_option("--max-shard-size", *shard_size,
                   "With --hf: the largest shard file (K, M, G suffixes of 2^10)")
      ->capture_default_str();
  export_command->callback([export_options, hf_options, shard_size, out, hf, &context] {
    if (hf->count() > 0) {
      const std::optional<std::int64_t> bytes = base::parse_bytes(*shard_size);
      if (!bytes || *bytes <= 0)
        throw UserError(fmt::format("--max-shard-size {} is not a size", *shard_size),
                        "pass a size such as 5GiB or 500M", 2);
      hf_options->path = export_options->path;
      hf_options->dtype = export_options->dtype;
      hf_options->max_shard_bytes = *bytes;
      context.exit_status = export_hf(*hf_options);
      return;
    }
    if (out->count() == 0)
      throw UserError("ckpt export needs --out FILE.safetensors or --hf DIR",
                      "pass one of them (strata ckpt export --help)", 2);
    context.exit_status = export_weights(*export_options);
  });
}

}  // namespace strata::tools
