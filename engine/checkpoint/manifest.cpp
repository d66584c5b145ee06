#include "engine/checkpoint/manifest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace strata::engine::checkpoint {
namespace {

using nlohmann::json;

json to_json(const optim::LossScalerState& s) {
  return {{"scale", s.scale},
          {"iteration", s.iteration},
          {"last_overflow_iteration", s.last_overflow_iteration},
          {"hysteresis_left", s.hysteresis_left},
          {"skipped_steps", s.skipped_steps}};
}

// Reads the fields of one JSON object, naming the file and the field's path in every refusal.
class Fields {
 public:
  Fields(const json& object, std::string where, const std::filesystem::path& path)
      : object_(object), where_(std::move(where)), path_(path) {
    if (!object_.is_object()) refuse("is not a JSON object");
  }

  template <typename T>
  T get(const char* key) const {
    const auto found = object_.find(key);
    if (found == object_.end()) refuse(fmt::format("has no \"{}\"", key));
    try {
      return found->get<T>();
    } catch (const json::exception&) {
      refuse(fmt::format("\"{}\" is {}, not what a strata checkpoint holds there", key,
                         found->dump()));
    }
  }
  const json& at(const char* key) const {
    const auto found = object_.find(key);
    if (found == object_.end()) refuse(fmt::format("has no \"{}\"", key));
    return *found;
  }
  [[noreturn]] void refuse(const std::string& what) const {
    throw UserError(fmt::format("{}: {} {}", path_.string(), where_, what),
                    "the checkpoint's manifest is damaged or was not written by strata: resume "
                    "from another checkpoint (ls the save directory), or save a new one",
                    1);
  }

 private:
  const json& object_;
  std::string where_;
  const std::filesystem::path& path_;
};

optim::LossScalerState scaler_from(const Fields& f) {
  optim::LossScalerState s;
  s.scale = f.get<double>("scale");
  s.iteration = f.get<std::int64_t>("iteration");
  s.last_overflow_iteration = f.get<std::int64_t>("last_overflow_iteration");
  s.hysteresis_left = f.get<std::int64_t>("hysteresis_left");
  s.skipped_steps = f.get<std::int64_t>("skipped_steps");
  return s;
}

}  // namespace

std::int64_t ManifestTensor::numel() const {
  std::int64_t count = 1;
  for (std::int64_t extent : shape)
    count *= extent;
  return count;
}

std::vector<std::int64_t> ManifestTensor::unpadded_shape() const {
  std::vector<std::int64_t> unpadded = shape;
  if (unpadded_rows > 0) unpadded.front() = unpadded_rows;
  return unpadded;
}

std::int64_t Manifest::parameter_count() const {
  std::int64_t count = 0;
  for (const ManifestTensor& tensor : tensors)
    count += tensor.numel();
  return count;
}

std::int64_t Manifest::total_bytes() const {
  std::int64_t bytes = 0;
  for (const ManifestFile& file : files)
    bytes += file.bytes;
  return bytes;
}

json to_json(const Manifest& m) {
  json tensors = json::array();
  for (const ManifestTensor& t : m.tensors) {
    json tensor = {{"name", t.name}, {"shape", t.shape}};
    if (t.unpadded_rows > 0) tensor["unpadded_rows"] = t.unpadded_rows;
    tensors.push_back(std::move(tensor));
  }
  json files = json::array();
  for (const ManifestFile& f : m.files) {
    files.push_back({{"name", f.name},
                     {"state", f.state},
                     {"rank", f.rank},
                     {"bytes", f.bytes},
                     {"crc32c", fmt::format("{:08x}", f.crc32c)}});
  }
  return {{"format", "strata checkpoint"},
          {"format_version", m.format},
          {"tag", m.tag},
          {"step", m.step},
          {"batches", m.batches},
          {"seed", m.seed},
          {"world_size", m.world_size},
          {"shard_ranks", m.shard_ranks},
          {"zero_stage", m.stage},
          {"offload_param", m.offload_param},
          {"offload_optimizer", m.offload_optimizer},
          {"optimizer", m.optimizer},
          {"precision", m.precision},
          {"loss_scaler", to_json(m.loss_scaler)},
          {"states", m.states},
          {"tensors", tensors},
          {"files", files},
          {"config", m.config},
          {"model_config", m.model_config}};
}

Manifest manifest_from_json(const json& root, const std::filesystem::path& path) {
  const Fields top(root, "manifest", path);
  Manifest m;
  if (top.get<std::string>("format") != "strata checkpoint") top.refuse("is not a strata manifest");
  m.format = top.get<int>("format_version");
  if (m.format > kFormatVersion || m.format < 1) {
    throw UserError(fmt::format("{}: checkpoint format version {} is not one this build reads "
                                "(it reads 1 to {})",
                                path.string(), m.format, kFormatVersion),
                    "load it with the strata version that saved it", 1);
  }
  m.tag = top.get<std::string>("tag");
  m.step = top.get<std::int64_t>("step");
  m.batches = top.get<std::int64_t>("batches");
  m.seed = top.get<std::uint64_t>("seed");
  m.world_size = top.get<int>("world_size");
  m.shard_ranks = top.get<int>("shard_ranks");
  m.stage = top.get<int>("zero_stage");
  m.offload_param = top.get<std::string>("offload_param");
  m.offload_optimizer = top.get<std::string>("offload_optimizer");
  m.optimizer = top.get<std::string>("optimizer");
  m.precision = top.get<std::string>("precision");
  m.loss_scaler = scaler_from(Fields(top.at("loss_scaler"), "loss_scaler", path));
  m.states = top.get<std::vector<std::string>>("states");
  m.config = top.at("config");
  if (root.contains("model_config")) m.model_config = root.at("model_config");
  for (const json& entry : top.at("tensors")) {
    const Fields t(entry, "tensor entry", path);
    ManifestTensor tensor{t.get<std::string>("name"), t.get<std::vector<std::int64_t>>("shape")};
    if (entry.contains("unpadded_rows")) {
      tensor.unpadded_rows = t.get<std::int64_t>("unpadded_rows");
      if (tensor.shape.empty() || tensor.unpadded_rows < 1 ||
          tensor.unpadded_rows > tensor.shape.front())
        t.refuse(fmt::format("unpadded_rows {} is not within tensor \"{}\"'s {} rows",
                             tensor.unpadded_rows, tensor.name,
                             tensor.shape.empty() ? 0 : tensor.shape.front()));
    }
    m.tensors.push_back(std::move(tensor));
  }
  for (const json& entry : top.at("files")) {
    const Fields f(entry, "file entry", path);
    ManifestFile file{f.get<std::string>("name"), f.get<std::string>("state"), f.get<int>("rank"),
                      f.get<std::int64_t>("bytes"), 0};
    const std::string crc = f.get<std::string>("crc32c");
    std::size_t used = 0;
    try {
      file.crc32c = static_cast<std::uint32_t>(std::stoul(crc, &used, 16));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != crc.size() || crc.size() != 8)
      f.refuse(fmt::format("crc32c \"{}\" is not 8 hex digits", crc));
    if (file.name.empty() || file.name.find('/') != std::string::npos || file.name[0] == '.')
      f.refuse(fmt::format("name \"{}\" is not a file of the checkpoint directory", file.name));
    m.files.push_back(std::move(file));
  }
  return m;
}

Manifest read_manifest(const std::filesystem::path& checkpoint) {
  const std::filesystem::path path = checkpoint / kManifestName;
  const std::string text = read_small_file(path);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& error) {
    throw UserError(fmt::format("{}: not valid JSON ({})", path.string(), error.what()),
                    "the manifest is damaged: resume from another checkpoint of the save "
                    "directory, or save a new one",
                    1);
  }
  return manifest_from_json(root, path);
}

void write_manifest(const std::filesystem::path& directory, const Manifest& manifest) {
  write_durable(directory / kManifestName, to_json(manifest).dump(2) + "\n");
}

void write_durable(const std::filesystem::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  std::size_t done = 0;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) {
    throw UserError(fmt::format("{}: cannot be written ({})", path.string(), std::strerror(error)),
                    error == ENOSPC ? fmt::format("free space at {}", path.parent_path().string())
                                    : "check that the directory is writable and the disk healthy",
                    1);
  }
}

std::string read_small_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UserError(fmt::format("{}: cannot be read ({})", path.string(), std::strerror(errno)),
                    "check the path: a checkpoint directory holds manifest.json, and a save "
                    "directory holds `latest` and one directory per tag",
                    1);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace strata::engine::checkpoint
