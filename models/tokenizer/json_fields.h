#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/error.h"

namespace strata::models::tokenizer {

// Reading a tokenizer file's components. `where` names the component and its file, as every
// refusal must ("the pre_tokenizer of /models/x/tokenizer.json").

[[noreturn]] inline void refuse_component(const std::string& where, std::string_view type) {
  throw UserError(
      fmt::format("{} is of type \"{}\", which strata's tokenizer does not implement", where, type),
      "use a model whose tokenizer.json is built from the components listed in "
      "docs/tokenizer.md");
}

[[noreturn]] inline void refuse_field(const std::string& where, std::string_view field,
                                      std::string_view problem) {
  throw UserError(fmt::format("{}: \"{}\" {}", where, field, problem),
                  "repair the file or take it again from the model's repository");
}

// The component's "type", refused when missing.
inline std::string type_of(const nlohmann::json& component, const std::string& where) {
  if (!component.is_object() || !component.contains("type") || !component["type"].is_string()) {
    refuse_field(where, "type", "is missing: every component names its type");
  }
  return component["type"].get<std::string>();
}

// An optional field of the given JSON kind; `fallback` when absent or null.
template <class T>
T field_or(const nlohmann::json& component, std::string_view field, T fallback,
           const std::string& where) {
  const auto found = component.find(field);
  if (found == component.end() || found->is_null()) return fallback;
  try {
    return found->template get<T>();
  } catch (const nlohmann::json::exception&) {
    refuse_field(where, field, fmt::format("has the wrong kind of value: {}", found->dump()));
  }
}

template <class T>
T required_field(const nlohmann::json& component, std::string_view field,
                 const std::string& where) {
  const auto found = component.find(field);
  if (found == component.end() || found->is_null()) refuse_field(where, field, "is missing");
  try {
    return found->template get<T>();
  } catch (const nlohmann::json::exception&) {
    refuse_field(where, field, fmt::format("has the wrong kind of value: {}", found->dump()));
  }
}

// A field that must hold one character (Metaspace's replacement, Strip's content): that
// character's code point.
char32_t one_char_field(const std::string& text, std::string_view field, const std::string& where);

}  // namespace strata::models::tokenizer
