#include "engine/checkpoint/shard_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "engine/checkpoint/model_match.h"

namespace strata::engine::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string damaged_fix(const fs::path& checkpoint) {
  return fmt::format(
      "resume from another checkpoint of {} (ls it; `strata ckpt inspect DIR "
      "--verify` checks one), or train anew",
      checkpoint.parent_path().string());
}

[[noreturn]] void refuse(const fs::path& checkpoint, const std::string& cause) {
  throw UserError(cause, damaged_fix(checkpoint), 1);
}

}  // namespace

ShardReader::ShardReader(fs::path checkpoint)
    : path_(std::move(checkpoint)), manifest_(read_manifest(path_)) {
  for (std::size_t f = 0; f < manifest_.files.size(); ++f) {
    const ManifestFile& file = manifest_.files[f];
    const fs::path path = path_ / file.name;
    std::error_code error;
    const auto size = fs::file_size(path, error);
    if (error)
      refuse(path_, fmt::format("{}: missing ({}), but the manifest lists it", path.string(),
                                error.message()));
    if (static_cast<std::int64_t>(size) != file.bytes) {
      refuse(path_,
             fmt::format(
                 "{}: holds {} bytes, but the manifest says {}: the file is {}", path.string(),
                 size, file.bytes,
                 static_cast<std::int64_t>(size) < file.bytes ? "truncated" : "not the one saved"));
    }
    files_.push_back(SafetensorsFile::open(path));
    index_file(f);
  }
  for (auto& [key, list] : index_) {
    std::sort(list.begin(), list.end(),
              [](const Source& a, const Source& b) { return a.param_offset < b.param_offset; });
  }
}

// Each tensor of a state file is a piece of the parameter of its name, at the offset the file's
// metadata gives.
void ShardReader::index_file(std::size_t f) {
  const ManifestFile& file = manifest_.files[f];
  const SafetensorsFile& st = files_[f];
  const std::string where = st.path().string();
  const auto state = st.metadata().find("state");
  if (state == st.metadata().end() || state->second != file.state)
    refuse(path_, fmt::format("{}: its metadata does not name state \"{}\" as the manifest does",
                              where, file.state));
  std::map<std::string, std::int64_t> numel;
  for (const ManifestTensor& tensor : manifest_.tensors)
    numel[tensor.name] = tensor.numel();
  for (const TensorEntry& entry : st.tensors()) {
    const auto offset = st.metadata().find("offset:" + entry.name);
    const auto total = numel.find(entry.name);
    if (total == numel.end())
      refuse(path_,
             fmt::format("{}: tensor \"{}\" is not one the manifest lists", where, entry.name));
    std::int64_t start = -1;
    if (offset != st.metadata().end()) {
      try {
        start = std::stoll(offset->second);
      } catch (const std::exception&) {
        start = -1;
      }
    }
    if (entry.dtype != Dtype::f32 || entry.shape.size() != 1 || start < 0 ||
        start + entry.shape[0] > total->second) {
      refuse(path_, fmt::format("{}: tensor \"{}\" is not a piece of F32 values inside its "
                                "parameter of {} elements",
                                where, entry.name, total->second));
    }
    index_[{file.state, entry.name}].push_back({f, &entry, start, entry.shape[0]});
  }
}

void ShardReader::check_model(std::span<const zero::TensorSlot> tensors) const {
  std::vector<ManifestTensor> model;
  model.reserve(tensors.size());
  for (const zero::TensorSlot& slot : tensors)
    model.push_back({slot.name, slot.shape, slot.unpadded_rows});
  checkpoint::check_model(manifest_, path_, model);
}

std::filesystem::path ShardReader::file_path(std::size_t index) const {
  return path_ / manifest_.files[index].name;
}

void ShardReader::check_crc(std::size_t f, std::uint32_t crc32c, std::int64_t bytes) const {
  const ManifestFile& file = manifest_.files[f];
  if (bytes == file.bytes && crc32c == file.crc32c) return;
  refuse(path_, fmt::format("{}: CRC32C {:08x} ({} bytes), but the manifest says {:08x} ({} "
                            "bytes): the file is damaged",
                            file_path(f).string(), crc32c, bytes, file.crc32c, file.bytes));
}

void ShardReader::refuse_damaged(const std::string& cause) const {
  refuse(path_, cause);
}

const std::vector<ShardReader::Source>* ShardReader::sources(const std::string& state,
                                                             const std::string& tensor) const {
  const auto found = index_.find({state, tensor});
  return found == index_.end() ? nullptr : &found->second;
}

}  // namespace strata::engine::checkpoint
