#include "models/tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_fields.h"

namespace strata::models::tokenizer {
namespace {

// A ["token", id] pair, as RobertaProcessing and BertProcessing write cls and sep.
std::int32_t pair_id(const nlohmann::json& processor, std::string_view field,
                     const std::string& where) {
  const auto pair = required_field<nlohmann::json>(processor, field, where);
  if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) {
    refuse_field(where, field, "is not a [\"token\", id] pair");
  }
  return pair[1].get<std::int32_t>();
}

}  // namespace

PostProcessor PostProcessor::from_json(const nlohmann::json& post_processor,
                                       const std::string& where) {
  PostProcessor made;
  if (!post_processor.is_null()) made.add(post_processor, where);
  return made;
}

PostProcessor PostProcessor::bos_eos(std::vector<std::int32_t> bos_ids,
                                     std::vector<std::int32_t> eos_ids) {
  PostProcessor made;
  made.wraps_.push_back({std::move(bos_ids), std::move(eos_ids)});
  return made;
}

void PostProcessor::add(const nlohmann::json& post_processor, const std::string& where) {
  const std::string type = type_of(post_processor, where);
  if (type == "Sequence") {
    for (const auto& inner : required_field<nlohmann::json>(post_processor, "processors", where)) {
      add(inner, where);
    }
  } else if (type == "TemplateProcessing") {
    add_template(post_processor, where);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    wraps_.push_back(
        {{pair_id(post_processor, "cls", where)}, {pair_id(post_processor, "sep", where)}});
  } else if (type != "ByteLevel") {  // ByteLevel trims offsets only; ids stay as they are
    refuse_component(where, type);
  }
}

void PostProcessor::add_template(const nlohmann::json& post_processor, const std::string& where) {
  const auto single = required_field<nlohmann::json>(post_processor, "single", where);
  const auto special_tokens =
      field_or(post_processor, "special_tokens", nlohmann::json::object(), where);
  Wrap wrap;
  bool seen_sequence = false;
  for (const auto& piece : single) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const auto name = piece.is_object() && piece.contains("SpecialToken")
                          ? field_or<std::string>(piece["SpecialToken"], "id", "", where)
                          : std::string();
    if (name.empty() || !special_tokens.contains(name)) {
      refuse_field(where, "single",
                   fmt::format("holds {}, which names no entry of special_tokens", piece.dump()));
    }
    const auto ids = required_field<std::vector<std::int32_t>>(special_tokens[name], "ids", where);
    auto& side = seen_sequence ? wrap.after : wrap.before;
    side.insert(side.end(), ids.begin(), ids.end());
  }
  wraps_.push_back(std::move(wrap));
}

void PostProcessor::add_special_tokens(std::vector<std::int32_t>& ids) const {
  for (const Wrap& wrap : wraps_) {
    ids.insert(ids.begin(), wrap.before.begin(), wrap.before.end());
    ids.insert(ids.end(), wrap.after.begin(), wrap.after.end());
  }
}

}  // namespace strata::models::tokenizer
