#pragma once

// A save directory and how a checkpoint enters it without a moment where a crash leaves
// `latest` naming something incomplete:
//
//   D/latest            the tag of the newest complete checkpoint, one line, replaced by rename
//   D/<tag>/            a complete checkpoint: manifest.json and the state files
//   D/.<tag>.partial/   a save in progress; a crash leaves it, the next save removes it,
//                       and nothing ever reads it
//   D/.<tag>.pruning/   an old checkpoint being removed (renamed out of the list first); a
//                       crash leaves it, the next save removes it
//
// A save writes and fsyncs every file in the partial directory, fsyncs it, renames it to
// D/<tag> (exchanging it with an older D/<tag> atomically), fsyncs D, then writes D/.latest.new,
// fsyncs it, renames it over D/latest and fsyncs D again. Pruning runs only after that.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace strata::engine::checkpoint {

// Throws UserError (exit status 2) for a tag that is empty, names a hidden file, holds a '/' or
// is "latest".
void check_tag(const std::string& tag);

// The tag D/latest names, or nothing when there is no D/latest.
std::optional<std::string> latest_tag(const std::filesystem::path& directory);

// The checkpoint `path` means: a checkpoint directory itself (it holds manifest.json), or a save
// directory, whose D/latest names the tag. Throws UserError naming what is missing and the fix.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

std::filesystem::path partial_directory(const std::filesystem::path& directory,
                                        const std::string& tag);

// Creates D when missing and an empty partial directory for `tag`, after removing every partial
// and pruning directory an interrupted save or prune left.
void begin_save(const std::filesystem::path& directory, const std::string& tag);

// Moves the complete partial directory of `tag` into place and points D/latest at it.
void publish(const std::filesystem::path& directory, const std::string& tag);

// Removes the complete checkpoints of D beyond the newest `keep_last` (by step, then tag), never
// the one D/latest names. 0 keeps all. Returns how many were removed.
int prune(const std::filesystem::path& directory, std::int64_t keep_last);

// fsync of a directory, so that renames and new entries in it survive a power loss.
void sync_directory(const std::filesystem::path& directory);

}  // namespace strata::engine::checkpoint
