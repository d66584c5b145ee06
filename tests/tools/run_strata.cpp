#include "tests/tools/run_strata.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace strata::tools::testing {
namespace {

std::string shell_quote(const std::string& word) {
  std::string quoted;
  quoted.reserve(word.size() + 2);
  quoted.push_back('\'');
  for (char c : word) {
    if (c == '\'') {
      quoted.append("'\\''");
    } else {
      quoted.push_back(c);
    }
  }
  quoted.push_back('\'');
  return quoted;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

RunResult run_strata(const std::vector<std::string>& arguments,
                     const std::filesystem::path& stdin_file) {
  TempDir scratch;
  std::filesystem::path err_path = scratch.path() / "stderr";
  std::string command = shell_quote(STRATA_BINARY);
  for (const std::string& argument : arguments)
    command.append(" ").append(shell_quote(argument));
  command.append(" 2>").append(shell_quote(err_path.string()));
  if (!stdin_file.empty()) command.append(" <").append(shell_quote(stdin_file.string()));
  RunResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + command);
  std::array<char, 4096> buffer{};
  std::size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.out.append(buffer.data(), got);
  }
  int status = ::pclose(pipe);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.err = read_file(err_path);
  return result;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "strata-tools-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::filesystem::path TempDir::write(const std::string& name, const std::string& text) const {
  std::filesystem::path file = path_ / name;
  std::ofstream(file) << text;
  return file;
}

}  // namespace strata::tools::testing
