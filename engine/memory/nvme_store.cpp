#include "engine/memory/nvme_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/round_up.h"
#include "base/units.h"

namespace strata::engine::memory {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kBlock = 4096;

const char* kPathFix =
    "set offload_optimizer.nvme_path (and offload_param.nvme_path) to a writable directory on a "
    "local NVMe drive (strata makes it when its parent is writable), reached through no symbolic "
    "link";

// The symbolic link refusal: strata never follows a link to its swap files, so that a link
// planted in the path cannot redirect them.
[[noreturn]] void refuse_link(const fs::path& path, const fs::path& link,
                              const fs::path& absolute) {
  throw UserError(fmt::format("nvme_path {} goes through the symbolic link {}; strata refuses swap "
                              "directories reached through a link",
                              path.string(), link.string()),
                  fmt::format("set nvme_path to the real directory ({})",
                              fs::weakly_canonical(absolute).string()),
                  2);
}

// The writable check of the directory swap files (or the missing folders) are made in.
void check_writable(const fs::path& path, const fs::path& directory, bool exists) {
  if (access(directory.c_str(), W_OK | X_OK) == 0) return;
  const int error = errno;
  if (exists)
    throw UserError(fmt::format("nvme_path {} is not writable by this user ({})", path.string(),
                                std::strerror(error)),
                    fmt::format("make {} writable (chmod/chown) or set nvme_path to a directory "
                                "you can write",
                                path.string()),
                    2);
  throw UserError(
      fmt::format("nvme_path {} does not exist and cannot be made: {} is not writable by this "
                  "user ({})",
                  path.string(), directory.string(), std::strerror(error)),
      fmt::format("create {} yourself (mkdir -p), make {} writable, or set nvme_path to a "
                  "directory you can write",
                  path.string(), directory.string()),
      2);
}

// The deepest existing directory of `absolute` and the components below it that are missing
// (none when the path exists). Refuses a symlink or a non-directory among the existing ones.
fs::path deepest_existing(const fs::path& path, const fs::path& absolute,
                          std::vector<fs::path>& missing) {
  fs::path prefix;
  fs::path existing = absolute.root_path();
  for (const fs::path& part : absolute) {
    prefix /= part;
    if (prefix == absolute.root_path()) continue;
    if (!missing.empty()) {
      missing.push_back(prefix);
      continue;
    }
    struct stat info {};
    if (lstat(prefix.c_str(), &info) != 0) {
      const int error = errno;
      if (error != ENOENT)
        throw UserError(fmt::format("nvme_path {}: {} cannot be examined ({})", path.string(),
                                    prefix.string(), std::strerror(error)),
                        kPathFix, 2);
      missing.push_back(prefix);
      continue;
    }
    if (S_ISLNK(info.st_mode)) refuse_link(path, prefix, absolute);
    if (!S_ISDIR(info.st_mode))
      throw UserError(
          fmt::format("nvme_path {}: {} is not a directory", path.string(), prefix.string()),
          kPathFix, 2);
    existing = prefix;
  }
  return existing;
}

}  // namespace

void check_nvme_path(const fs::path& path) {
  if (path.empty()) throw UserError("nvme_path is empty", kPathFix, 2);
  const fs::path absolute = fs::absolute(path).lexically_normal();
  std::vector<fs::path> missing;
  const fs::path existing = deepest_existing(path, absolute, missing);
  check_writable(path, existing, missing.empty());
}

void make_nvme_path(const fs::path& path) {
  check_nvme_path(path);
  const fs::path absolute = fs::absolute(path).lexically_normal();
  std::vector<fs::path> missing;
  deepest_existing(path, absolute, missing);
  for (const fs::path& directory : missing) {
    // Another rank may make the same folder at the same moment: EEXIST is fine when what exists
    // is a real directory, which the check below sees.
    if (mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
      const int error = errno;
      throw UserError(fmt::format("nvme_path {}: cannot make {} ({})", path.string(),
                                  directory.string(), std::strerror(error)),
                      fmt::format("create {} yourself (mkdir -p) or set nvme_path to a directory "
                                  "you can write",
                                  path.string()),
                      2);
    }
  }
  if (!missing.empty()) {
    check_nvme_path(path);
    base::logger("engine").info("made the swap folder {} (nvme_path)", path.string());
  }
}

namespace {

// mkdir mode 0700 (chmod too, past the umask); EEXIST is fine if it is a real directory.
void make_private_directory(const fs::path& directory, const fs::path& nvme_path) {
  if (mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
    const int error = errno;
    throw UserError(fmt::format("cannot create the swap directory {} under nvme_path {}: {}",
                                directory.string(), nvme_path.string(), std::strerror(error)),
                    fmt::format("make {} writable or set nvme_path to a directory you can write",
                                nvme_path.string()),
                    2);
  }
  struct stat info {};
  if (lstat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    throw UserError(fmt::format("{} exists and is not a directory", directory.string()),
                    fmt::format("remove {} or choose another strata.job_name", directory.string()),
                    2);
  chmod(directory.c_str(), 0700);
}

std::string read_lock_owner(const fs::path& lock_path) {
  std::ifstream in(lock_path);
  std::stringstream text;
  text << in.rdbuf();
  std::string owner = text.str();
  while (!owner.empty() && owner.back() == '\n')
    owner.pop_back();
  return owner.empty() ? "an unknown process" : owner;
}

}  // namespace

NvmeStore::NvmeStore(NvmeStoreOptions options) : options_(std::move(options)) {
  check_nvme_path(options_.nvme_path);
  const fs::path base_path = fs::absolute(options_.nvme_path).lexically_normal();
  job_directory_ = base_path / fmt::format("strata-{}", options_.job_name);
  const std::string rank_name = options_.store_name.empty()
                                    ? fmt::format("rank{}", options_.rank)
                                    : fmt::format("rank{}-{}", options_.rank, options_.store_name);
  rank_directory_ = job_directory_ / rank_name;
  lock_path_ = job_directory_ / (rank_name + ".lock");
}

NvmeStore::NvmeStore(NvmeStoreOptions options, std::span<const std::int64_t> partition_bytes)
    : NvmeStore(std::move(options)) {
  reserve(partition_bytes);
  open(options_.registered);
}

int NvmeStore::reserve(std::span<const std::int64_t> partition_bytes) {
  STRATA_ASSERT(!is_open());
  const int first = partition_count();
  for (std::int64_t bytes : partition_bytes) {
    STRATA_ASSERT(bytes >= 0);
    offsets_.push_back(planned_bytes_);
    sizes_.push_back(base::round_up(bytes, kBlock));
    planned_bytes_ += base::round_up(bytes, kBlock);
  }
  return first;
}

std::int64_t NvmeStore::planned_bytes(int first, int count) const {
  STRATA_ASSERT(first >= 0 && count >= 0 && first + count <= partition_count());
  std::int64_t bytes = 0;
  for (int i = first; i < first + count; ++i)
    bytes += sizes_[i];
  return bytes;
}

void NvmeStore::open(std::span<std::byte> registered) {
  STRATA_ASSERT(!is_open());
  // As DeepSpeed's swappers make their folders (os.makedirs in
  // swap_tensor/partitioned_param_swapper.py and optimizer_utils.py), a missing nvme_path is made.
  make_nvme_path(options_.nvme_path);
  swap_path_ = rank_directory_ / "swap.bin";
  check_free_space();
  make_private_directory(job_directory_, options_.nvme_path);
  take_lock();
  // From here on the lock is held: a failure gives it back and removes what was made.
  try {
    std::error_code error;
    if (fs::exists(fs::symlink_status(rank_directory_))) {
      fs::remove_all(rank_directory_, error);
      base::logger("engine").warn(
          "removed {} left by a previous run of job {} that did not exit cleanly",
          rank_directory_.string(), options_.job_name);
    }
    make_private_directory(rank_directory_, options_.nvme_path);
    aio::EngineOptions engine_options = options_.aio;
    engine_options.verify_checksums = true;
    engine_ = std::make_unique<aio::Engine>(engine_options, options_.faults, registered);
    registered_ = registered;
    file_.emplace(engine_->open(swap_path_, aio::OpenMode::create));
    if (planned_bytes_ > 0) file_->allocate(planned_bytes_);
  } catch (...) {
    file_.reset();
    engine_.reset();
    std::error_code ignored;
    aio::remove_file(swap_path_);
    fs::remove_all(rank_directory_, ignored);
    fs::remove(lock_path_, ignored);
    ::close(lock_fd_);
    lock_fd_ = -1;
    fs::remove(job_directory_, ignored);
    throw;
  }
  base::logger("engine").debug("swap store {}: {} partitions, {} preallocated", swap_path_.string(),
                               partition_count(), base::format_bytes(planned_bytes_));
}

// The plan's bytes plus the checksum sidecar (4 bytes per 4 KiB block) and a little slack, or a
// refusal before anything is made.
void NvmeStore::check_free_space() const {
  const fs::path base_path = fs::absolute(options_.nvme_path).lexically_normal();
  const std::int64_t needed = planned_bytes_ + planned_bytes_ / kBlock * 4 + (1 << 20);
  struct statvfs fs_info {};
  if (statvfs(base_path.c_str(), &fs_info) != 0) return;
  const auto free_bytes =
      static_cast<std::int64_t>(fs_info.f_bavail) * static_cast<std::int64_t>(fs_info.f_frsize);
  if (free_bytes >= needed) return;
  throw UserError(
      fmt::format("nvme_path {} has {} free, but the planned swap states of rank {} need {} "
                  "({} bytes)",
                  options_.nvme_path.string(), base::format_bytes(free_bytes), options_.rank,
                  base::format_bytes(needed), needed),
      "free space on that drive, set nvme_path to a larger one, or offload fewer states "
      "(offload_optimizer.device cpu, more ranks, or a smaller model)");
}

// The job directory's lock, held while the store lives, with this process's name in it; a live
// job's lock is refused, naming the job and the ways around it.
void NvmeStore::take_lock() {
  lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock_fd_ < 0) {
    const int error = errno;
    throw UserError(
        fmt::format("cannot open the lock file {} under nvme_path {}: {}", lock_path_.string(),
                    options_.nvme_path.string(), std::strerror(error)),
        fmt::format("make {} writable", options_.nvme_path.string()), 2);
  }
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const std::string owner = read_lock_owner(lock_path_);
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw UserError(
        fmt::format("the swap directory {} is in use by a live job ({})", rank_directory_.string(),
                    owner),
        fmt::format(
            "give this job another name, \"strata\": {{\"job_name\": \"{}-2\"}} (it is \"{}\"), "
            "or point its zero_optimization.offload_param/offload_optimizer.nvme_path at "
            "another directory than {}, or stop the other job",
            options_.job_name, options_.job_name, options_.nvme_path.string()));
  }
  const std::string owner = fmt::format("pid {} job {}", getpid(), options_.job_name);
  if (ftruncate(lock_fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = pwrite(lock_fd_, owner.data(), owner.size(), 0);
  }
}

NvmeStore::~NvmeStore() {
  if (engine_) {
    try {
      engine_->wait_all();
    } catch (const std::exception& e) {
      base::logger("engine").debug("swap store: error dropped at shutdown: {}", e.what());
    }
  }
  file_.reset();
  engine_.reset();
  if (lock_fd_ < 0) return;  // never opened: nothing was made
  std::error_code error;
  if (!swap_path_.empty()) aio::remove_file(swap_path_);
  fs::remove_all(rank_directory_, error);
  fs::remove(lock_path_, error);
  ::close(lock_fd_);
  fs::remove(job_directory_, error);  // only when empty: other ranks may still be there
}

void NvmeStore::check_partition(int partition, std::int64_t bytes) const {
  STRATA_ASSERT(is_open());
  STRATA_ASSERT(partition >= 0 && partition < partition_count());
  STRATA_ASSERT(bytes <= sizes_[partition]);
}

aio::Ticket NvmeStore::submit_write(int partition, std::span<const std::byte> source) {
  check_partition(partition, static_cast<std::int64_t>(source.size()));
  return engine_->submit_write(*file_, offsets_[partition], source);
}

aio::Ticket NvmeStore::submit_write(int partition, std::int64_t offset,
                                    std::span<const std::byte> source) {
  STRATA_ASSERT(offset >= 0 && offset % 4096 == 0 && source.size() % 4096 == 0);
  check_partition(partition, offset + static_cast<std::int64_t>(source.size()));
  return engine_->submit_write(*file_, offsets_[partition] + offset, source);
}

aio::Ticket NvmeStore::submit_read(int partition, std::span<std::byte> target) {
  check_partition(partition, static_cast<std::int64_t>(target.size()));
  return engine_->submit_read(*file_, offsets_[partition], target);
}

aio::Ticket NvmeStore::submit_read(int partition, std::int64_t offset,
                                   std::span<std::byte> target) {
  STRATA_ASSERT(offset >= 0 && offset % 4096 == 0 && target.size() % 4096 == 0);
  check_partition(partition, offset + static_cast<std::int64_t>(target.size()));
  return engine_->submit_read(*file_, offsets_[partition] + offset, target);
}

void NvmeStore::wait(aio::Ticket ticket) {
  engine_->wait(ticket);
}

void NvmeStore::wait_all() {
  engine_->wait_all();
}

std::int64_t NvmeStore::completions() const {
  return engine_ ? engine_->stats().requests : 0;
}

std::int64_t NvmeStore::extent_bytes(int partition) const {
  STRATA_ASSERT(partition >= 0 && partition < partition_count());
  return sizes_[partition];
}

std::int64_t NvmeStore::extent_offset(int partition) const {
  STRATA_ASSERT(partition >= 0 && partition < partition_count());
  return offsets_[partition];
}

}  // namespace strata::engine::memory
