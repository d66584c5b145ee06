#include "tools/train_output.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/log.h"
#include "base/units.h"

namespace strata::tools {

namespace {

// 75 s -> "1:15"; 4000 s -> "1:06:40".
std::string clock_time(double seconds) {
  const auto total = static_cast<std::int64_t>(std::max(0.0, seconds) + 0.5);
  if (total >= 3600)
    return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
  return fmt::format("{}:{:02}", total / 60, total % 60);
}

}  // namespace

TrainProgress::TrainProgress(std::int64_t first_step, std::int64_t last_step,
                             std::int64_t print_every, bool enabled)
    : first_step_(first_step),
      last_step_(last_step),
      interval_(interval(last_step - first_step + 1, print_every)),
      enabled_(enabled),
      terminal_(isatty(STDOUT_FILENO) != 0),
      started_(std::chrono::steady_clock::now()) {}

std::int64_t TrainProgress::interval(std::int64_t run_steps, std::int64_t print_every) {
  const std::int64_t twentieth = std::max<std::int64_t>(1, run_steps / 20);
  return std::max<std::int64_t>(1, std::min(print_every, twentieth));
}

std::string TrainProgress::line(const engine::StepStats& stats, double tokens_per_s,
                                double validation_loss) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const auto done = static_cast<double>(stats.step - first_step_ + 1);
  const double left = elapsed / std::max(done, 1.0) * static_cast<double>(last_step_ - stats.step);
  const std::string validation =
      validation_loss >= 0 ? fmt::format(" val {:.4f}", validation_loss) : "";
  const std::string memory = fmt::format(
      "peak gpu {} cpu {}", base::format_bytes(static_cast<double>(stats.gpu_peak_bytes)),
      base::format_bytes(static_cast<double>(peak_rss_bytes())));
  const std::string traffic =
      fmt::format("h2d {} d2h {} nvme r/w {}/{}",
                  base::format_bytes(static_cast<double>(stats.transfers.bytes_h2d)),
                  base::format_bytes(static_cast<double>(stats.transfers.bytes_d2h)),
                  base::format_bytes(static_cast<double>(stats.bytes_nvme_read)),
                  base::format_bytes(static_cast<double>(stats.bytes_nvme_write)));
  return fmt::format(
      "step {:5d}/{} | loss {:.4f}{} | lr {:.3e} | norm {:.3g} | {:7.0f} ms | {:8.0f} tok/s | "
      "{} elapsed, {} left | {} | {}{}",
      stats.step, last_step_, stats.loss, validation, stats.lr, stats.grad_norm,
      stats.seconds * 1e3, tokens_per_s, clock_time(elapsed), clock_time(left), memory, traffic,
      stats.skipped ? " | skipped (fp16 overflow)" : "");
}

void TrainProgress::update(const engine::StepStats& stats, double tokens_per_s,
                           double validation_loss) {
  if (!enabled_) return;
  const bool kept = stats.step % interval_ == 0 || stats.step == first_step_ ||
                    validation_loss >= 0 || stats.step == last_step_;
  const std::string text = line(stats, tokens_per_s, validation_loss);
  if (terminal_) {
    constexpr int kWidth = 24;
    auto filled = static_cast<int>(kWidth * stats.step / std::max<std::int64_t>(1, last_step_));
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    fmt::print("\r\033[K[{}] {}", bar, text);
    if (kept) fmt::print("\n");
    std::fflush(stdout);
    return;
  }
  if (kept) {
    fmt::print("{}\n", text);
    std::fflush(stdout);
  }
}

void TrainProgress::show(std::string_view text) {
  if (!enabled_) return;
  if (terminal_) fmt::print("\r\033[K");
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

void TrainProgress::finish() {
  if (enabled_ && terminal_) fmt::print("\n");
}

std::int64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

MetricsWriter::MetricsWriter(const std::filesystem::path& path, bool append) {
  if (path.empty()) return;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) {
    throw UserError(fmt::format("cannot write the metrics file {}", path.string()),
                    "pass --metrics a path in a writable directory");
  }
}

void MetricsWriter::write(const engine::StepStats& stats, double tokens_per_s,
                          double validation_loss, const std::optional<TrainSample>& sample) {
  if (!out_.is_open()) return;
  nlohmann::json line = {
      {"step", stats.step},
      {"loss", stats.loss},
      {"lr", stats.lr},
      {"grad_norm", stats.grad_norm},
      {"loss_scale", stats.loss_scale},
      {"skipped", stats.skipped},
      {"seconds", stats.seconds},
      {"tokens", stats.tokens},
      {"loss_tokens", stats.loss_tokens},
      {"tokens_per_s", tokens_per_s},
      {"bytes_h2d", stats.transfers.bytes_h2d},
      {"bytes_d2h", stats.transfers.bytes_d2h},
      {"bytes_nvme_read", stats.bytes_nvme_read},
      {"bytes_nvme_write", stats.bytes_nvme_write},
      {"gpu_peak_bytes", stats.gpu_peak_bytes},
      {"cpu_peak_bytes", stats.cpu_peak_bytes},
      {"rss_peak_bytes", peak_rss_bytes()},
      {"early_sub_groups", stats.early_sub_groups},
      {"late_sub_groups", stats.late_sub_groups},
      {"undone_sub_groups", stats.undone_sub_groups},
      {"allocation_waits", stats.allocation_waits},
      {"device_allocations", stats.device_allocations},
  };
  if (validation_loss >= 0) line["val_loss"] = validation_loss;
  if (sample) line["sample"] = {{"prompt", sample->prompt}, {"text", sample->continuation}};
  out_ << line.dump() << '\n';
  out_.flush();
}

std::vector<LossPoint> earlier_losses(const std::filesystem::path& out_dir,
                                      std::int64_t up_to_step) {
  std::vector<LossPoint> points;
  std::ifstream in(out_dir / "loss.tsv");
  for (std::string row; std::getline(in, row);) {
    if (row.empty() || row.front() == '#') continue;
    std::istringstream fields(row);
    LossPoint point;
    std::string validation;
    if (!(fields >> point.step >> point.train_loss >> validation)) continue;
    if (point.step > up_to_step) break;
    char* end = nullptr;
    const double value = std::strtod(validation.c_str(), &end);
    point.validation_loss = validation == "NaN" || *end != '\0' ? -1 : value;
    points.push_back(point);
  }
  return points;
}

std::filesystem::path plot_losses(const std::filesystem::path& out_dir,
                                  const std::vector<LossPoint>& points, double entropy_floor) {
  auto table = out_dir / "loss.tsv";
  auto png = out_dir / "loss.png";
  {
    std::ofstream out(table, std::ios::trunc);
    out << "# step\ttrain_loss\tvalidation_loss\n";
    for (const LossPoint& point : points) {
      out << point.step << '\t' << point.train_loss << '\t';
      if (point.validation_loss >= 0) {
        out << point.validation_loss;
      } else {
        out << "NaN";
      }
      out << '\n';
    }
  }
  auto script = out_dir / "loss.gp";
  {
    std::ofstream out(script, std::ios::trunc);
    out << "set terminal pngcairo size 900,560 noenhanced\n"
        << "set output '" << png.filename().string() << "'\n"
        << "set title 'strata train: loss'\nset xlabel 'step'\nset ylabel 'loss (nats/token)'\n"
        << "set grid\nset key top right\nset datafile missing 'NaN'\n";
    if (entropy_floor > 0) {
      out << "floor = " << entropy_floor << "\n";
    }
    out << "plot '" << table.filename().string() << "' using 1:2 with lines lw 2 title 'train', '"
        << table.filename().string() << "' using 1:3 with linespoints pt 7 title 'validation'";
    if (entropy_floor > 0) out << ", floor with lines dt 2 title 'entropy floor of the corpus'";
    out << "\n";
  }
  return run_gnuplot(script, table, "the curves") ? png : std::filesystem::path();
}

bool run_gnuplot(const std::filesystem::path& script, const std::filesystem::path& data,
                 std::string_view what) {
  // In the script's folder: the scripts name their table and PNG relative to it.
  const std::filesystem::path folder =
      script.has_parent_path() ? script.parent_path() : std::filesystem::path(".");
  std::string command = fmt::format("cd '{}' && gnuplot '{}' 2>/dev/null", folder.string(),
                                    script.filename().string());
  if (std::system(command.c_str()) == 0) return true;
  base::logger("tools").warn(
      "gnuplot failed or is missing: {} are in {} but no PNG was drawn (install gnuplot-nox)", what,
      data.string());
  return false;
}

}  // namespace strata::tools
