#include "engine/checkpoint/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <system_error>

#include "base/assert.h"
#include "base/error.h"

namespace strata::engine::checkpoint {
namespace {

using nlohmann::json;

// The safetensors library refuses headers over 100 MB; so does strata.
constexpr std::uint64_t max_header_bytes = 100'000'000;

struct DtypeName {
  Dtype dtype;
  const char* name;
  std::int64_t bytes;
};

constexpr std::array<DtypeName, 13> dtype_names = {{
    {Dtype::boolean, "BOOL", 1},
    {Dtype::u8, "U8", 1},
    {Dtype::i8, "I8", 1},
    {Dtype::i16, "I16", 2},
    {Dtype::u16, "U16", 2},
    {Dtype::f16, "F16", 2},
    {Dtype::bf16, "BF16", 2},
    {Dtype::i32, "I32", 4},
    {Dtype::u32, "U32", 4},
    {Dtype::f32, "F32", 4},
    {Dtype::f64, "F64", 8},
    {Dtype::i64, "I64", 8},
    {Dtype::u64, "U64", 8},
}};

// A file the reader refuses: damaged, truncated, or not safetensors.
[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& cause) {
  throw UserError(fmt::format("{}: {}", path.string(), cause),
                  "the file is damaged or is not a safetensors file: write it again (or "
                  "download it again) and check its size against the source",
                  1);
}

// numel x element size, or -1 when a dimension is negative or the product overflows.
std::int64_t byte_size(Dtype dtype, const std::vector<std::int64_t>& shape) {
  std::int64_t bytes = element_bytes(dtype);
  for (std::int64_t extent : shape) {
    if (extent < 0) return -1;
    if (extent != 0 && bytes > INT64_MAX / extent) return -1;
    bytes *= extent;
  }
  return bytes;
}

// The header as JSON; duplicate names refused (a silently dropped tensor would load wrong).
json parse_header(const std::filesystem::path& path, std::string_view text) {
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end) open_objects.pop_back();
    if (event == json::parse_event_t::key &&
        !open_objects.back().insert(parsed.get<std::string>()).second)
      refuse(path, fmt::format("the header names \"{}\" twice", parsed.get<std::string>()));
    return true;
  };
  try {
    json header = json::parse(text.begin(), text.end(), callback);
    if (!header.is_object()) refuse(path, "the header is not a JSON object");
    return header;
  } catch (const json::exception& error) {
    refuse(path, fmt::format("the header is not valid JSON ({})", error.what()));
  }
}

Dtype parse_dtype(const std::filesystem::path& path, const std::string& name, const json& value) {
  for (const DtypeName& known : dtype_names)
    if (value == known.name) return known.dtype;
  refuse(path, fmt::format("tensor \"{}\": dtype {} is not one strata reads (BOOL, U8, I8, I16, "
                           "U16, F16, BF16, I32, U32, F32, F64, I64, U64)",
                           name, value.dump()));
}

// A count in the header (`what`: "shape" or "data_offsets"): a non-negative integer.
std::int64_t parse_count(const std::filesystem::path& path, const std::string& name,
                         const char* what, const json& value) {
  if (!value.is_number_unsigned() || value.get<std::uint64_t>() > INT64_MAX)
    refuse(path, fmt::format("tensor \"{}\": {} holds {}, not a count of elements or bytes", name,
                             what, value.dump()));
  return value.get<std::int64_t>();
}

TensorEntry parse_entry(const std::filesystem::path& path, const std::string& name,
                        const json& value) {
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
      !value.contains("data_offsets") || value.size() != 3)
    refuse(path, fmt::format("tensor \"{}\": expected {{\"dtype\", \"shape\", \"data_offsets\"}}, "
                             "got {}",
                             name, value.dump().substr(0, 200)));
  TensorEntry entry{name, parse_dtype(path, name, value["dtype"]), {}, 0, 0};
  const json& shape = value["shape"];
  const json& offsets = value["data_offsets"];
  if (!shape.is_array() || !offsets.is_array() || offsets.size() != 2)
    refuse(path,
           fmt::format("tensor \"{}\": shape must be a list and data_offsets two numbers", name));
  for (const json& extent : shape)
    entry.shape.push_back(parse_count(path, name, "shape", extent));
  entry.begin = parse_count(path, name, "data_offsets", offsets[0]);
  entry.end = parse_count(path, name, "data_offsets", offsets[1]);
  const std::int64_t needed = byte_size(entry.dtype, entry.shape);
  if (entry.end < entry.begin || needed != entry.bytes())
    refuse(path, fmt::format("tensor \"{}\": data_offsets [{}, {}] hold {} bytes, but {} {} needs "
                             "{}",
                             name, entry.begin, entry.end, entry.end - entry.begin,
                             to_string(entry.dtype), shape.dump(), needed));
  return entry;
}

// The tensors must cover the data section exactly: each begins where the previous ended.
void check_coverage(const std::filesystem::path& path, const std::vector<TensorEntry>& tensors,
                    std::int64_t data_bytes) {
  std::int64_t at = 0;
  for (const TensorEntry& tensor : tensors) {
    if (tensor.begin != at)
      refuse(path, fmt::format("tensor \"{}\" starts at byte {} of the data, but the tensor "
                               "before it ends at {} (a hole or an overlap)",
                               tensor.name, tensor.begin, at));
    at = tensor.end;
  }
  if (at != data_bytes)
    refuse(path, fmt::format("the tensors end at byte {} of the data, but the file holds {} "
                             "bytes of data (truncated, or extended)",
                             at, data_bytes));
}

std::uint64_t read_le64(const std::byte* bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | std::to_integer<std::uint64_t>(bytes[i]);
  return value;
}

}  // namespace

const char* to_string(Dtype dtype) {
  for (const DtypeName& known : dtype_names)
    if (known.dtype == dtype) return known.name;
  return "?";
}

std::int64_t element_bytes(Dtype dtype) {
  for (const DtypeName& known : dtype_names)
    if (known.dtype == dtype) return known.bytes;
  return 0;
}

std::int64_t TensorEntry::numel() const {
  std::int64_t count = 1;
  for (std::int64_t extent : shape)
    count *= extent;
  return count;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  try {
    file.mapping_ = base::MappedFile::open(path);
  } catch (const std::system_error& error) {
    throw UserError(fmt::format("{}: {}", path.string(), error.what()),
                    std::string_view(error.what()).starts_with("cannot be mapped")
                        ? "check the file and its disk"
                        : "give the path of an existing, readable .safetensors file",
                    1);
  }
  const std::size_t size = file.mapping_.size();
  if (size < 8) refuse(path, fmt::format("it holds {} bytes, less than a header length", size));
  const std::byte* bytes = file.mapping_.bytes().data();
  const std::uint64_t header_bytes = read_le64(bytes);
  if (header_bytes > max_header_bytes || header_bytes > size - 8)
    refuse(path, fmt::format("its header length says {} bytes, but the file holds {} in all",
                             header_bytes, size));
  file.data_offset_ = 8 + static_cast<std::int64_t>(header_bytes);
  const json header =
      parse_header(path, std::string_view(reinterpret_cast<const char*>(bytes) + 8, header_bytes));
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") {
      file.tensors_.push_back(parse_entry(path, name, value));
      continue;
    }
    if (!value.is_object()) refuse(path, "__metadata__ is not an object of strings");
    for (const auto& [key, text] : value.items()) {
      if (!text.is_string()) refuse(path, fmt::format("__metadata__.{} is not a string", key));
      file.metadata_[key] = text.get<std::string>();
    }
  }
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  check_coverage(path, file.tensors_, static_cast<std::int64_t>(size) - file.data_offset_);
  return file;
}

const TensorEntry* SafetensorsFile::find(std::string_view name) const {
  for (const TensorEntry& tensor : tensors_)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

std::span<const std::byte> SafetensorsFile::data(const TensorEntry& tensor) const {
  STRATA_ASSERT(data_offset_ + tensor.end <= static_cast<std::int64_t>(mapping_.size()));
  return mapping_.bytes().subspan(static_cast<std::size_t>(data_offset_ + tensor.begin),
                                  static_cast<std::size_t>(tensor.bytes()));
}

}  // namespace strata::engine::checkpoint
