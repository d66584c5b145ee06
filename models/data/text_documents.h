#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace strata::models {

// The documents of a text file as users have them: a .txt file is one document; each non-blank
// line of a .jsonl (or .ndjson) file is one, its "text" field. The file is mapped; a JSON line
// is parsed only when its document is asked for, so that threads can share the parsing.
class TextDocuments {
 public:
  // Throws UserError naming the file when it is missing or unreadable.
  static TextDocuments open(const std::filesystem::path& path);
  // Whether `path` names a file open() takes: .txt, .jsonl or .ndjson.
  static bool takes(const std::filesystem::path& path);

  std::size_t size() const { return spans_.size(); }
  // Document `index`'s text, valid UTF-8. `scratch` holds a JSON line's unescaped text. Throws
  // UserError naming the file (and the line) for invalid UTF-8, a line that is not JSON, or one
  // without a string "text" field (naming the fields it has).
  std::string_view document(std::size_t index, std::string& scratch) const;
  // For JSON Lines: line `index` parsed, an object. Throws UserError naming the file and line for
  // invalid UTF-8, a line that is not JSON or not an object.
  nlohmann::ordered_json json_line(std::size_t index) const;
  bool json_lines() const { return json_lines_; }
  // "FILE line N" (or "FILE" for a .txt), for errors about document `index`.
  std::string where(std::size_t index) const;
  // The bytes of the file, for progress.
  std::size_t file_bytes() const { return mapping_.size(); }
  // The bytes document `index` spans in the file.
  std::size_t document_bytes(std::size_t index) const { return spans_[index].length; }
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Span {
    std::size_t offset;
    std::size_t length;
    std::size_t line;  // 1-based, for a JSON line; 0 for a whole .txt file
  };
  std::string_view bytes() const;
  std::string_view utf8_bytes(std::size_t index) const;

  std::filesystem::path path_;
  base::MappedFile mapping_;
  bool json_lines_ = false;
  std::vector<Span> spans_;
};

// "the fields "a", "b"" (or "no fields"), for a refusal naming what a line has.
std::string json_field_names(const nlohmann::ordered_json& line);

}  // namespace strata::models
