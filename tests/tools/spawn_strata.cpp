#include "tests/tools/spawn_strata.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace strata::tools::testing {
namespace {

void check(int result, const char* what) {
  if (result != 0) throw std::runtime_error(std::string(what) + ": " + std::strerror(result));
}

int status_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

SpawnedStrata::SpawnedStrata(const std::vector<std::string>& arguments) {
  std::array<int, 2> out_pipe{};
  std::array<int, 2> err_pipe{};
  if (::pipe2(out_pipe.data(), O_CLOEXEC) != 0 || ::pipe2(err_pipe.data(), O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  check(posix_spawn_file_actions_init(&actions), "posix_spawn_file_actions_init");
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  // A test runner may start us with SIGINT ignored; the child must see it with its default
  // disposition until it installs its own handler.
  posix_spawnattr_t attributes;
  check(posix_spawnattr_init(&attributes), "posix_spawnattr_init");
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> words = {STRATA_BINARY};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& word : words)
    argv.push_back(word.data());
  argv.push_back(nullptr);
  int spawned = posix_spawn(&pid_, STRATA_BINARY, &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  out_fd_ = out_pipe[0];
  err_fd_ = err_pipe[0];
  if (spawned != 0) {
    pid_ = -1;
    ::close(out_fd_);
    ::close(err_fd_);
    check(spawned, "posix_spawn " STRATA_BINARY);
  }
}

SpawnedStrata::~SpawnedStrata() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

bool SpawnedStrata::pump(std::chrono::steady_clock::time_point deadline) {
  std::array<pollfd, 2> fds = {pollfd{out_fd_, POLLIN, 0}, pollfd{err_fd_, POLLIN, 0}};
  if (out_fd_ < 0 && err_fd_ < 0) return false;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  int ready =
      ::poll(fds.data(), fds.size(),
             static_cast<int>(std::max<std::int64_t>(0, static_cast<std::int64_t>(left.count()))));
  if (ready < 0 && errno != EINTR) throw std::runtime_error("poll failed");
  std::array<char, 4096> buffer{};
  std::array<std::string*, 2> sinks = {&out_, &err_};
  std::array<int*, 2> owners = {&out_fd_, &err_fd_};
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].fd < 0 || fds[i].revents == 0) continue;
    ssize_t got = ::read(fds[i].fd, buffer.data(), buffer.size());
    if (got > 0) {
      sinks[i]->append(buffer.data(), static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      ::close(*owners[i]);
      *owners[i] = -1;
    }
  }
  return out_fd_ >= 0 || err_fd_ >= 0;
}

bool SpawnedStrata::wait_for_output(const std::string& text, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (out_.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline || out_fd_ < 0) return false;
    pump(deadline);
  }
  return true;
}

void SpawnedStrata::interrupt() {
  if (pid_ > 0) ::kill(pid_, SIGINT);
}

void SpawnedStrata::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

RunResult SpawnedStrata::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool open = true;
  while (open && std::chrono::steady_clock::now() < deadline)
    open = pump(deadline);
  RunResult result;
  if (pid_ > 0) {
    // Both pipes at end of file: the child is exiting, so a blocking wait returns soon. Pipes
    // still open at the deadline: the child hangs, and is killed.
    if (open) ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    result.exit_status = status_of(status);
  }
  result.out = out_;
  result.err = err_;
  return result;
}

}  // namespace strata::tools::testing
