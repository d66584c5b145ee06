#include "models/tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>

#include "models/tokenizer/json_fields.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {
namespace {

// A thread's words already tokenized, for one model at a time. Bounded: when full it starts
// over, which costs a few recomputed words and never a wrong one.
struct WordCache {
  static constexpr std::size_t words_max = 1 << 16;
  // Longer words are not kept: a model without a pre-tokenizer (Llama 2, Mistral, Gemma) gets
  // whole texts as one word, which would never repeat and would fill memory.
  static constexpr std::size_t word_bytes_max = 256;
  std::uint64_t model_serial = 0;
  std::unordered_map<std::string, std::pair<std::uint32_t, std::uint32_t>, StringViewHash,
                     std::equal_to<>>
      spans;  // word -> [offset, count) in ids
  std::vector<std::int32_t> ids;

  void reset(std::uint64_t serial) {
    model_serial = serial;
    spans.clear();
    ids.clear();
  }
};

WordCache& word_cache() {
  thread_local WordCache cache;
  return cache;
}

std::uint64_t next_serial() {
  static std::atomic<std::uint64_t> serial{0};
  return ++serial;
}

// A symbol of a word being merged: a token, linked to its neighbours.
struct Symbol {
  std::int32_t id;
  std::int32_t previous;
  std::int32_t next;
  bool removed;
};

// A merge waiting in the queue: the pair starting at symbol `position`.
struct Candidate {
  std::int32_t rank;
  std::int32_t position;
  std::int32_t merged_id;
};

// The queue's order: lowest rank first, then leftmost, as the tokenizers' Word::merge_all.
bool runs_later(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
}

}  // namespace

BpeModel BpeModel::from_json(const nlohmann::json& model, const std::string& where) {
  const std::string type = field_or<std::string>(model, "type", "BPE", where);
  if (type != "BPE") refuse_component(where, type);
  if (field_or(model, "dropout", 0.0, where) > 0.0) {
    refuse_field(where, "dropout", "is set, which makes encoding random: set it to null");
  }
  BpeModel made;
  made.serial_ = next_serial();
  made.read_vocabulary(required_field<nlohmann::json>(model, "vocab", where), where);
  made.fuse_unk_ = field_or(model, "fuse_unk", false, where);
  made.byte_fallback_ = field_or(model, "byte_fallback", false, where);
  made.ignore_merges_ = field_or(model, "ignore_merges", false, where);
  made.continuing_subword_prefix_ =
      field_or<std::string>(model, "continuing_subword_prefix", "", where);
  made.end_of_word_suffix_ = field_or<std::string>(model, "end_of_word_suffix", "", where);
  const auto unk = field_or<std::string>(model, "unk_token", "", where);
  if (!unk.empty()) {
    made.unk_id_ = made.token_to_id(unk);
    if (!made.unk_id_) refuse_field(where, "unk_token", "names a token not in the vocabulary");
  }
  for (int byte = 0; byte < 256; ++byte) {
    made.byte_ids_[byte] = made.token_to_id(fmt::format("<0x{:02X}>", byte)).value_or(-1);
  }
  made.read_merges(required_field<nlohmann::json>(model, "merges", where), where);
  return made;
}

void BpeModel::read_vocabulary(const nlohmann::json& vocabulary, const std::string& where) {
  if (!vocabulary.is_object()) refuse_field(where, "vocab", "is not an object of token: id");
  vocabulary_.reserve(vocabulary.size());
  for (const auto& [token, id_json] : vocabulary.items()) {
    if (!id_json.is_number_integer() || id_json.get<std::int64_t>() < 0 ||
        id_json.get<std::int64_t>() > INT32_MAX) {
      refuse_field(where, "vocab", fmt::format("gives \"{}\" the id {}", token, id_json.dump()));
    }
    const auto id = id_json.get<std::int32_t>();
    vocabulary_.insert_or_assign(token, id);
    if (tokens_by_id_.size() <= id) tokens_by_id_.resize(id + 1);
    tokens_by_id_[id] = token;
  }
}

void BpeModel::read_merges(const nlohmann::json& merges, const std::string& where) {
  if (!merges.is_array()) refuse_field(where, "merges", "is not a list");
  merges_.reserve(merges.size());
  std::int32_t rank = 0;
  std::string merged;  // reused: a file has hundreds of thousands of merges
  for (const auto& merge : merges) {
    if (merge.is_string()) {
      const std::string_view text = merge.get_ref<const std::string&>();
      const std::size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        refuse_field(where, "merges", fmt::format("holds \"{}\", not \"left right\"", text));
      }
      add_merge(text.substr(0, space), text.substr(space + 1), rank++, merged, where);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      add_merge(merge[0].get_ref<const std::string&>(), merge[1].get_ref<const std::string&>(),
                rank++, merged, where);
    } else {
      refuse_field(where, "merges", fmt::format("holds {}, not a pair of tokens", merge.dump()));
    }
  }
}

void BpeModel::add_merge(std::string_view left, std::string_view right, std::int32_t rank,
                         std::string& merged, const std::string& where) {
  // The merged token drops the right side's continuing-subword prefix ("##").
  merged.assign(left);
  merged.append(right.substr(std::min(continuing_subword_prefix_.size(), right.size())));
  const auto left_id = token_to_id(left);
  const auto right_id = token_to_id(right);
  const auto merged_id = token_to_id(merged);
  if (!left_id || !right_id || !merged_id) {
    const std::string_view missing = !left_id ? left : !right_id ? right : std::string_view(merged);
    refuse_field(where, "merges",
                 fmt::format("merge {} (\"{} {}\") uses \"{}\", which is not in the vocabulary",
                             rank, left, right, missing));
  }
  merges_.insert_or_assign(pair_key(*left_id, *right_id), Merge{rank, *merged_id});
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto found = vocabulary_.find(token);
  if (found == vocabulary_.end()) return std::nullopt;
  return found->second;
}

void BpeModel::word_ids(std::string_view word, std::vector<std::int32_t>& symbols) const {
  // ignore_merges: a word the vocabulary holds whole is that token, whatever the merges say.
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      symbols.assign(1, *id);
      return;
    }
  }
  initial_symbols(word, symbols);
  merge_all(symbols);
}

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& ids) const {
  if (word.empty()) return;
  thread_local std::vector<std::int32_t> symbols;
  if (word.size() > WordCache::word_bytes_max) {
    word_ids(word, symbols);
    ids.insert(ids.end(), symbols.begin(), symbols.end());
    return;
  }
  // The cache first: a word seen before costs one lookup, whatever made its ids.
  WordCache& cache = word_cache();
  if (cache.model_serial != serial_) cache.reset(serial_);
  if (const auto hit = cache.spans.find(word); hit != cache.spans.end()) {
    const auto [offset, count] = hit->second;
    ids.insert(ids.end(), cache.ids.begin() + offset, cache.ids.begin() + offset + count);
    return;
  }
  word_ids(word, symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  if (cache.spans.size() >= WordCache::words_max) cache.reset(serial_);
  cache.spans.emplace(std::string(word), std::pair{static_cast<std::uint32_t>(cache.ids.size()),
                                                   static_cast<std::uint32_t>(symbols.size())});
  cache.ids.insert(cache.ids.end(), symbols.begin(), symbols.end());
}

void BpeModel::initial_symbols(std::string_view word, std::vector<std::int32_t>& symbols) const {
  symbols.clear();
  std::optional<std::int32_t> pending_unk;  // an unk not yet added, which fuse_unk may extend
  std::string piece;
  std::size_t offset = 0;
  while (offset < word.size()) {
    const std::size_t start = offset;
    offset += utf8_sequence_length(static_cast<unsigned char>(word[offset]));
    piece.clear();
    if (start > 0) piece += continuing_subword_prefix_;
    piece.append(word.substr(start, offset - start));
    if (offset >= word.size()) piece += end_of_word_suffix_;
    if (const auto id = token_to_id(piece)) {
      if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
      symbols.push_back(*id);
      continue;
    }
    // byte_fallback: every byte of the piece as its <0xNN> token, when the vocabulary has all.
    const bool bytes_known = std::all_of(piece.begin(), piece.end(), [&](char byte) {
      return byte_ids_[static_cast<unsigned char>(byte)] >= 0;
    });
    if (byte_fallback_ && bytes_known) {
      if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
      for (const char byte : piece)
        symbols.push_back(byte_ids_[static_cast<unsigned char>(byte)]);
      continue;
    }
    if (!unk_id_) continue;  // no unk token: the tokenizers drop the character
    if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk) symbols.push_back(*pending_unk);
}

void BpeModel::merge_all(std::vector<std::int32_t>& ids) const {
  if (ids.size() < 2 || merges_.empty()) return;
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> queue;
  symbols.clear();
  queue.clear();
  const auto count = static_cast<std::int32_t>(ids.size());
  for (std::int32_t i = 0; i < count; ++i) {
    symbols.push_back({ids[i], i - 1, i + 1 < count ? i + 1 : -1, false});
  }
  const auto enqueue = [&](std::int32_t position) {
    const Symbol& left = symbols[position];
    if (left.next < 0) return;
    const auto found = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (found == merges_.end()) return;
    queue.push_back({found->second.rank, position, found->second.merged_id});
    std::push_heap(queue.begin(), queue.end(), runs_later);
  };
  for (std::int32_t i = 0; i + 1 < count; ++i)
    enqueue(i);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), runs_later);
    const Candidate top = queue.back();
    queue.pop_back();
    Symbol& left = symbols[top.position];
    if (left.removed || left.next < 0) continue;
    // An entry is stale when either side has merged since: the pair it names is gone.
    const auto current = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (current == merges_.end() || current->second.merged_id != top.merged_id) continue;
    Symbol& right = symbols[left.next];
    left.id = top.merged_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].previous = top.position;
    if (left.previous >= 0) enqueue(left.previous);
    enqueue(top.position);
  }
  ids.clear();
  for (const Symbol& symbol : symbols) {
    if (!symbol.removed) ids.push_back(symbol.id);
  }
}

}  // namespace strata::models::tokenizer
