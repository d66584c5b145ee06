#include "engine/checkpoint/save_directory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "engine/checkpoint/manifest.h"

namespace strata::engine::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLatest = "latest";

[[noreturn]] void refuse_io(const std::string& what, const fs::path& path, int error) {
  throw UserError(fmt::format("{} {} failed ({})", what, path.string(), std::strerror(error)),
                  error == ENOSPC
                      ? fmt::format("free space at {}", path.parent_path().string())
                      : "check that the save directory is writable and on a healthy disk",
                  1);
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
    text.pop_back();
  return text;
}

}  // namespace

void check_tag(const std::string& tag) {
  if (tag.empty() || tag[0] == '.' || tag.find('/') != std::string::npos || tag == kLatest) {
    throw UserError(fmt::format("checkpoint tag \"{}\" cannot name a directory of the save "
                                "directory",
                                tag),
                    "use a tag such as global_step100: not empty, no '/', not starting with '.', "
                    "not \"latest\"",
                    2);
  }
}

std::optional<std::string> latest_tag(const fs::path& directory) {
  const fs::path path = directory / kLatest;
  std::error_code error;
  if (!fs::exists(path, error)) return std::nullopt;
  return trimmed(read_small_file(path));
}

fs::path resolve_checkpoint(const fs::path& path) {
  std::error_code error;
  if (fs::exists(path / kManifestName, error)) return path;
  if (!fs::is_directory(path, error)) {
    throw UserError(fmt::format("no checkpoint at {}: it is not a directory", path.string()),
                    "give a save directory (it holds `latest`) or a checkpoint directory in it "
                    "(it holds manifest.json)",
                    2);
  }
  const std::optional<std::string> tag = latest_tag(path);
  if (!tag) {
    throw UserError(
        fmt::format("no checkpoint at {}: it holds neither `latest` nor manifest.json",
                    path.string()),
        "give the directory a run saved into (strata train --save-dir), or one of its tag "
        "directories",
        2);
  }
  check_tag(*tag);
  const fs::path checkpoint = path / *tag;
  if (!fs::exists(checkpoint / kManifestName, error)) {
    throw UserError(
        fmt::format("{}/latest names {}, which holds no manifest.json", path.string(), *tag),
        fmt::format("give one of the complete checkpoints in {} (ls it), or save anew",
                    path.string()),
        1);
  }
  return checkpoint;
}

fs::path partial_directory(const fs::path& directory, const std::string& tag) {
  return directory / fmt::format(".{}.partial", tag);
}

// Removes what an interrupted save or prune left: `.TAG.partial` directories (nothing reads them)
// and `.TAG.pruning` ones (a checkpoint already taken out of the list).
void sweep_leftovers(const fs::path& directory) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(".") || !entry.is_directory()) continue;
    if (!name.ends_with(".partial") && !name.ends_with(".pruning")) continue;
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

void begin_save(const fs::path& directory, const std::string& tag) {
  check_tag(tag);
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) refuse_io("creating the save directory", directory, error.value());
  sweep_leftovers(directory);
  const fs::path partial = partial_directory(directory, tag);
  fs::create_directory(partial, error);
  if (error) refuse_io("creating", partial, error.value());
}

void publish(const fs::path& directory, const std::string& tag) {
  const fs::path partial = partial_directory(directory, tag);
  const fs::path target = directory / tag;
  sync_directory(partial);
  std::error_code error;
  if (fs::exists(target, error)) {
    // The same tag saved again: swap the two in one step, so that D/<tag> is always complete.
    if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
      refuse_io("replacing", target, errno);
    fs::remove_all(partial, error);
  } else if (::rename(partial.c_str(), target.c_str()) != 0) {
    refuse_io("renaming into place", target, errno);
  }
  sync_directory(directory);
  const fs::path next = directory / ".latest.new";
  write_durable(next, tag + "\n");
  if (::rename(next.c_str(), (directory / kLatest).c_str()) != 0)
    refuse_io("replacing", directory / kLatest, errno);
  sync_directory(directory);
}

int prune(const fs::path& directory, std::int64_t keep_last) {
  if (keep_last <= 0) return 0;
  const std::optional<std::string> latest = latest_tag(directory);
  struct Complete {
    std::int64_t step;
    std::string tag;
  };
  std::vector<Complete> complete;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
    const std::string tag = entry.path().filename().string();
    if (!entry.is_directory() || tag.starts_with(".") || !fs::exists(entry.path() / kManifestName))
      continue;
    try {
      complete.push_back({read_manifest(entry.path()).step, tag});
    } catch (const UserError&) {
      continue;  // not a checkpoint strata can read: not strata's to remove
    }
  }
  std::sort(complete.begin(), complete.end(), [](const Complete& a, const Complete& b) {
    return a.step != b.step ? a.step > b.step : a.tag > b.tag;
  });
  int removed = 0;
  for (std::size_t i = static_cast<std::size_t>(keep_last); i < complete.size(); ++i) {
    if (latest && complete[i].tag == *latest) continue;
    // Out of the list in one rename first, so that a crash part way through the removal leaves a
    // directory the next save sweeps away, not a checkpoint without its manifest.
    const fs::path doomed = directory / fmt::format(".{}.pruning", complete[i].tag);
    std::error_code error;
    fs::rename(directory / complete[i].tag, doomed, error);
    if (!error) fs::remove_all(doomed, error);
    if (error) {
      base::logger("checkpoint")
          .warn("could not remove old checkpoint {}: {}", (directory / complete[i].tag).string(),
                error.message());
      continue;
    }
    ++removed;
  }
  if (removed > 0) sync_directory(directory);
  return removed;
}

void sync_directory(const fs::path& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    refuse_io("syncing", directory, error);
  }
  ::close(fd);
}

}  // namespace strata::engine::checkpoint
