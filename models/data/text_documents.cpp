#include "models/data/text_documents.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <system_error>

#include "base/error.h"
#include "models/tokenizer/utf8.h"

namespace strata::models {
namespace {

bool is_json_lines(const std::filesystem::path& path) {
  return path.extension() == ".jsonl" || path.extension() == ".ndjson";
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// The names of an object's fields, for the refusal of a line without "text".
std::string field_names(const nlohmann::ordered_json& line) {
  if (!line.is_object()) return fmt::format("no fields: the line is a JSON {}", line.type_name());
  std::string names;
  for (const auto& [key, value] : line.items()) {
    names += names.empty() ? "" : ", ";
    names += fmt::format("\"{}\"", key);
  }
  return names.empty() ? "no fields" : "the fields " + names;
}

}  // namespace

bool TextDocuments::takes(const std::filesystem::path& path) {
  return path.extension() == ".txt" || is_json_lines(path);
}

TextDocuments TextDocuments::open(const std::filesystem::path& path) {
  TextDocuments documents;
  documents.path_ = path;
  documents.json_lines_ = is_json_lines(path);
  try {
    documents.mapping_ = base::MappedFile::open(path);
  } catch (const std::system_error& error) {
    throw UserError(fmt::format("{} {}", path.string(), error.what()),
                    "give the path of a readable .txt or .jsonl file", 2);
  }
  const std::string_view bytes = documents.bytes();
  if (!documents.json_lines_) {
    documents.spans_.push_back({0, bytes.size(), 0});
    return documents;
  }
  std::size_t line = 0;
  for (std::size_t start = 0; start < bytes.size();) {
    const std::size_t newline = bytes.find('\n', start);
    const std::size_t end = newline == std::string_view::npos ? bytes.size() : newline;
    ++line;
    if (!is_blank(bytes.substr(start, end - start))) {
      documents.spans_.push_back({start, end - start, line});
    }
    start = end + 1;
  }
  return documents;
}

std::string_view TextDocuments::bytes() const {
  const auto all = mapping_.bytes();
  return {reinterpret_cast<const char*>(all.data()), all.size()};
}

std::string TextDocuments::where(std::size_t index) const {
  const Span& span = spans_[index];
  return span.line == 0 ? path_.string() : fmt::format("{} line {}", path_.string(), span.line);
}

// The bytes of document `index`, refused naming the byte when they are not UTF-8.
std::string_view TextDocuments::utf8_bytes(std::size_t index) const {
  const Span& span = spans_[index];
  const std::string_view raw = bytes().substr(span.offset, span.length);
  const std::size_t bad = tokenizer::invalid_utf8_offset(raw);
  if (bad != std::string_view::npos) {
    throw UserError(
        fmt::format("{} is not valid UTF-8 at byte {}", path_.string(), span.offset + bad),
        "convert the file to UTF-8 (iconv -f <its encoding> -t UTF-8)", 2);
  }
  return raw;
}

nlohmann::ordered_json TextDocuments::json_line(std::size_t index) const {
  const std::string_view raw = utf8_bytes(index);
  nlohmann::ordered_json line;
  try {
    line = nlohmann::ordered_json::parse(raw);
  } catch (const nlohmann::json::parse_error& error) {
    throw UserError(fmt::format("{} is not JSON: {}", where(index), error.what()),
                    "write one JSON object per line, such as {\"text\": \"...\"}", 2);
  }
  if (!line.is_object()) {
    throw UserError(fmt::format("{} is a JSON {}, not an object", where(index), line.type_name()),
                    "write one JSON object per line, such as {\"text\": \"...\"}", 2);
  }
  return line;
}

std::string_view TextDocuments::document(std::size_t index, std::string& scratch) const {
  if (!json_lines_) return utf8_bytes(index);
  const nlohmann::ordered_json line = json_line(index);
  if (!line.contains("text") || !line["text"].is_string()) {
    throw UserError(
        fmt::format("{} has no string \"text\" field; it has {}", where(index), field_names(line)),
        "give each line its document as {\"text\": \"...\"}", 2);
  }
  scratch = line["text"].get<std::string>();
  return scratch;
}

std::string json_field_names(const nlohmann::ordered_json& line) {
  return field_names(line);
}

}  // namespace strata::models
