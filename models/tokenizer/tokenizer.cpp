#include "models/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "aio/crc32c.h"
#include "base/by_index.h"
#include "base/error.h"
#include "models/tokenizer/added_tokens.h"
#include "models/tokenizer/bpe_model.h"
#include "models/tokenizer/decoder.h"
#include "models/tokenizer/json_fields.h"
#include "models/tokenizer/normalizer.h"
#include "models/tokenizer/post_processor.h"
#include "models/tokenizer/pre_tokenizer.h"
#include "models/tokenizer/tokenizer_config.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {

struct Tokenizer::Impl {
  std::string source;
  std::uint64_t content_hash = 0;
  TokenizerConfig config;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedTokens added;
  PostProcessor post_processor;
  Decoder decoder;
  base::ByIndex<std::string> tokens_by_id;  // the model's tokens, then the added ones
  base::ByIndex<bool> special_by_id;
  std::optional<std::int32_t> bos_id;
  std::optional<std::int32_t> eos_id;
  std::optional<std::int32_t> metaspace_id;  // "▁", for Llama without legacy

  void encode_text(std::string_view text, std::vector<std::int32_t>& ids) const;
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const;
};

namespace {

std::string read_file(const std::filesystem::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UserError(fmt::format("cannot read {} {}", what, path.string()),
                    "give a model folder holding tokenizer.json, or the path of a tokenizer.json");
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return std::move(bytes).str();
}

nlohmann::json parse(std::string_view text, const std::string& where) {
  if (text.empty()) return nullptr;
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw UserError(fmt::format("{} is not valid JSON: {}", where, error.what()),
                    "take the file again from the model's repository");
  }
}

std::uint32_t crc_of(std::string_view text) {
  return aio::crc32c(std::as_bytes(std::span(text.data(), text.size())));
}

// transformers' clean_up_tokenization: no space before punctuation and English contractions.
std::string clean_up_tokenization(std::string text) {
  static const std::pair<std::string_view, std::string_view> rules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : rules) {
    std::string out;
    std::size_t copied = 0;
    for (std::size_t at = text.find(from); at != std::string::npos;
         at = text.find(from, at + from.size())) {
      out.append(text, copied, at - copied);
      out.append(to);
      copied = at + from.size();
    }
    out.append(text, copied);
    text = std::move(out);
  }
  return text;
}

}  // namespace
}  // namespace strata::models::tokenizer

namespace strata::models::tokenizer {
namespace {

// The id of `token`: an added token's, else the model's.
std::optional<std::int32_t> find_token(const Tokenizer::Impl& impl, std::string_view token) {
  for (const AddedToken& added : impl.added.tokens()) {
    if (added.content == token) return added.id;
  }
  return impl.model.token_to_id(token);
}

// The special token the config names, as an id; refused when the config names one the
// tokenizer does not have.
std::optional<std::int32_t> special_id(const Tokenizer::Impl& impl,
                                       const std::optional<std::string>& token, const char* field,
                                       const std::string& where) {
  if (!token) return std::nullopt;
  if (const auto id = find_token(impl, *token)) return id;
  refuse_field(where, field,
               fmt::format("names \"{}\", which the tokenizer has no id for", *token));
}

void index_tokens(Tokenizer::Impl& impl) {
  impl.tokens_by_id = impl.model.tokens_by_id();
  impl.special_by_id.assign(impl.tokens_by_id.size(), false);
  for (const AddedToken& added : impl.added.tokens()) {
    const std::int32_t id = added.id;
    if (impl.tokens_by_id.size() <= id) {
      impl.tokens_by_id.resize(id + 1);
      impl.special_by_id.resize(id + 1);
    }
    impl.tokens_by_id[id] = added.content;
    impl.special_by_id[id] = added.special;
  }
}

// transformers' Llama tokenizers without legacy: no normalizer, and a Metaspace that prepends
// only at the start of the text. Before the added tokens are read, which are normalized.
void apply_legacy(Tokenizer::Impl& impl, const std::string& where) {
  if (!impl.config.llama_without_legacy()) return;
  impl.normalizer = Normalizer::from_json(nullptr, where);
  impl.pre_tokenizer = PreTokenizer::from_json({{"type", "Metaspace"},
                                                {"replacement", "\u2581"},
                                                {"prepend_scheme", "first"},
                                                {"split", false}},
                                               where);
}

// The special tokens of tokenizer_config.json and the post-processor transformers builds from
// them for the Llama and Gemma classes, over tokenizer.json's.
void apply_special_tokens(Tokenizer::Impl& impl, const nlohmann::json& file,
                          const std::string& where) {
  const TokenizerConfig& config = impl.config;
  const std::string config_where = "tokenizer_config.json beside " + impl.source;
  impl.bos_id = special_id(impl, config.bos_token, "bos_token", config_where);
  impl.eos_id = special_id(impl, config.eos_token, "eos_token", config_where);
  if (config.llama_without_legacy()) impl.metaspace_id = impl.model.token_to_id("\u2581");
  if (!config.rebuilds_post_processor()) {
    impl.post_processor = PostProcessor::from_json(file.value("post_processor", nlohmann::json()),
                                                   "the post_processor of " + where);
    return;
  }
  // The classes' own BOS and EOS stand where the config names none, if the tokenizer has them.
  const auto [default_bos, default_eos] = config.default_bos_eos();
  if (!config.bos_token) impl.bos_id = find_token(impl, default_bos);
  if (!config.eos_token) impl.eos_id = find_token(impl, default_eos);
  std::vector<std::int32_t> before;
  std::vector<std::int32_t> after;
  if (config.add_bos_token.value_or(true) && impl.bos_id) before.push_back(*impl.bos_id);
  if (config.add_eos_token.value_or(false) && impl.eos_id) after.push_back(*impl.eos_id);
  impl.post_processor = PostProcessor::bos_eos(std::move(before), std::move(after));
}

std::unique_ptr<Tokenizer::Impl> build(std::string_view tokenizer_json,
                                       std::string_view config_json,
                                       std::string_view special_tokens_map_json,
                                       const std::string& source) {
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->source = source;
  impl->content_hash = (static_cast<std::uint64_t>(crc_of(tokenizer_json)) << 32) |
                       crc_of(std::string(config_json) + std::string(special_tokens_map_json));
  const nlohmann::json file = parse(tokenizer_json, source);
  if (!file.is_object()) refuse_field(source, "model", "is missing: this is no tokenizer.json");
  const std::string config_where = "tokenizer_config.json beside " + source;
  impl->config = TokenizerConfig::from_json(
      parse(config_json, config_where), parse(special_tokens_map_json, config_where), config_where);
  impl->normalizer = Normalizer::from_json(file.value("normalizer", nlohmann::json()),
                                           "the normalizer of " + source);
  impl->pre_tokenizer = PreTokenizer::from_json(file.value("pre_tokenizer", nlohmann::json()),
                                                "the pre_tokenizer of " + source);
  apply_legacy(*impl, source);
  impl->model = BpeModel::from_json(required_field<nlohmann::json>(file, "model", source),
                                    "the model of " + source);
  impl->added = AddedTokens::from_json(file.value("added_tokens", nlohmann::json()),
                                       impl->normalizer, "the added_tokens of " + source);
  impl->decoder =
      Decoder::from_json(file.value("decoder", nlohmann::json()), "the decoder of " + source);
  index_tokens(*impl);
  apply_special_tokens(*impl, file, source);
  return impl;
}

}  // namespace

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<std::int32_t>& ids) const {
  const bool split_special = config.split_special_tokens;
  const PreTokenizer::OnWord to_model = [&](std::string_view word) { model.tokenize(word, ids); };
  added.split_raw(
      text, split_special, [&](std::string_view piece, std::int32_t id, std::size_t start) {
        if (id >= 0) {
          ids.push_back(id);
          return;
        }
        const bool starts_input = start == 0;
        // Without a normalizer the piece is its own normalized text: no copy.
        std::string normalized_storage;
        std::string_view normalized = piece;
        if (!normalizer.empty()) {
          normalized_storage = normalizer.normalize(piece);
          normalized = normalized_storage;
        }
        added.split_normalized(
            normalized, split_special,
            [&](std::string_view part, std::int32_t part_id, std::size_t part_start) {
              if (part_id >= 0) {
                ids.push_back(part_id);
              } else {
                pre_tokenizer.pre_tokenize(part, starts_input && part_start == 0, to_model);
              }
            });
      });
}

std::string Tokenizer::Impl::decode(std::span<const std::int32_t> ids,
                                    bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= tokens_by_id.size()) continue;
    if (tokens_by_id[id].empty()) continue;
    if (skip_special_tokens && special_by_id[id]) continue;
    tokens.push_back(tokens_by_id[id]);
  }
  return decoder.decode(std::move(tokens));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code error;
  const bool is_folder = std::filesystem::is_directory(path, error);
  const std::filesystem::path file = is_folder ? path / "tokenizer.json" : path;
  const std::filesystem::path folder = file.parent_path();
  if (!std::filesystem::exists(file, error)) {
    throw UserError(fmt::format("{} does not exist", file.string()),
                    is_folder ? "this folder has no tokenizer.json: give the model folder that "
                                "save_pretrained wrote, which holds one"
                              : "give a model folder holding tokenizer.json, or its path");
  }
  const auto optional_file = [&](const char* name) {
    const std::filesystem::path beside = folder / name;
    return std::filesystem::exists(beside, error) ? read_file(beside, name) : std::string();
  };
  return Tokenizer(build(read_file(file, "the tokenizer file"),
                         optional_file("tokenizer_config.json"),
                         optional_file("special_tokens_map.json"), file.string()));
}

Tokenizer Tokenizer::from_json_text(std::string_view tokenizer_json, std::string_view config_json,
                                    const std::string& source) {
  return Tokenizer(build(tokenizer_json, config_json, "", source));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<std::int32_t> ids;
  encode_into(text, add_special_tokens, ids);
  return ids;
}

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens,
                            std::vector<std::int32_t>& ids) const {
  if (const std::size_t bad = invalid_utf8_offset(text); bad != std::string_view::npos) {
    throw UserError(fmt::format("the text to encode is not valid UTF-8 at byte {}", bad),
                    "convert the text to UTF-8 (iconv -f <its encoding> -t UTF-8)");
  }
  std::vector<std::int32_t> encoded;
  if (impl_->metaspace_id && !text.empty()) {
    // transformers' Llama without legacy: a "▁" leads the text, and is dropped again where a
    // special token follows it.
    std::string led = "\u2581";
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t next = text.find("\u2581", at);
      led.append(text.substr(at, next - at));
      if (next == std::string_view::npos) break;
      led += ' ';
      at = next + 3;
    }
    impl_->encode_text(led, encoded);
    if (encoded.size() > 1 && encoded[0] == *impl_->metaspace_id &&
        impl_->special_by_id[encoded[1]]) {
      encoded.erase(encoded.begin());
    }
  } else {
    impl_->encode_text(text, encoded);
  }
  if (add_special_tokens) impl_->post_processor.add_special_tokens(encoded);
  ids.insert(ids.end(), encoded.begin(), encoded.end());
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  std::string text = impl_->decode(ids, skip_special_tokens);
  return impl_->config.clean_up_tokenization_spaces ? clean_up_tokenization(std::move(text)) : text;
}

std::int64_t Tokenizer::vocab_size() const {
  return static_cast<std::int64_t>(impl_->tokens_by_id.size());
}
std::optional<std::int32_t> Tokenizer::eos_id() const {
  return impl_->eos_id;
}
std::optional<std::int32_t> Tokenizer::bos_id() const {
  return impl_->bos_id;
}
const std::string& Tokenizer::source() const {
  return impl_->source;
}
std::uint64_t Tokenizer::content_hash() const {
  return impl_->content_hash;
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return find_token(*impl_, token);
}

bool Tokenizer::is_special(std::int32_t id) const {
  return id >= 0 && id < impl_->special_by_id.size() && impl_->special_by_id[id];
}

std::string Tokenizer::bos_token() const {
  if (!impl_->bos_id) return "";
  const std::int32_t id = *impl_->bos_id;
  return decode_raw(std::span(&id, 1), false);
}

std::string Tokenizer::eos_token() const {
  if (!impl_->eos_id) return "";
  const std::int32_t id = *impl_->eos_id;
  return decode_raw(std::span(&id, 1), false);
}

DecodeStream::DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string DecodeStream::step(std::int32_t id) {
  ids_.push_back(id);
  const std::string text = tokenizer_->decode_raw(ids_, skip_special_tokens_);
  // Text ending in U+FFFD may be an incomplete UTF-8 sequence that the next id completes.
  const bool held = text.size() <= prefix_.size() || text.ends_with("\xEF\xBF\xBD");
  if (held) return {};
  const std::string added = text.substr(prefix_.size());
  // Keep a window from the previous emission on, so that decoders that look at their first
  // token (Metaspace, Strip) see the same context again.
  const std::size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_->decode_raw(ids_, skip_special_tokens_);
  prefix_index_ = new_prefix_index;
  return added;
}

std::string Tokenizer::decode_raw(std::span<const std::int32_t> ids,
                                  bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

}  // namespace strata::models::tokenizer
