#include "tools/timeline_plot.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <string>

#include "tools/train_output.h"

namespace strata::tools {
namespace {

// Rows from the top: what the host enqueues, then the device's streams, then the CPU and the
// disk; lanes without spans are left out. Lanes not listed (a stream of another name) come
// after, in order of appearance.
constexpr std::array<std::string_view, 8> kLaneOrder = {
    "host", "compute", "h2d", "d2h", "gradients", "optimizer", "nvme read", "nvme write"};

// The kinds a span is drawn as, by the first word of its label or by its lane.
struct Kind {
  std::string_view name;
  std::string_view colour;
};
constexpr std::array<Kind, 11> kKinds = {{{"forward", "#4a4a4a"},
                                          {"backward", "#8c8c8c"},
                                          {"step", "#17becf"},
                                          {"kernel", "#1f77b4"},
                                          {"copy", "#ff7f0e"},
                                          {"fill", "#bcbd22"},
                                          {"wait", "#c7c7c7"},
                                          {"optimizer", "#9467bd"},
                                          {"gradients", "#e377c2"},
                                          {"read", "#2ca02c"},
                                          {"write", "#d62728"}}};

int kind_of(const base::Timeline::Span& span) {
  const auto index = [](std::string_view name) {
    for (std::size_t k = 0; k < kKinds.size(); ++k)
      if (kKinds[k].name == name) return static_cast<int>(k);
    return 0;
  };
  if (span.lane == "host") {
    if (span.label.starts_with("wait")) return index("wait");
    if (span.label.starts_with("forward")) return index("forward");
    if (span.label.starts_with("backward")) return index("backward");
    return index("step");
  }
  if (span.lane == "optimizer") return index("optimizer");
  // The gradient reducer's CPU queue: adds, scans and swaps of landed gradients.
  if (span.lane == "gradients") return index("gradients");
  if (span.lane == "nvme read") return index("read");
  if (span.lane == "nvme write") return index("write");
  const std::string_view label = span.label;
  if (label.starts_with("copy")) return index("copy");
  if (label.starts_with("fill")) return index("fill");
  if (label.starts_with("wait")) return index("wait");
  return index("kernel");
}

}  // namespace

std::filesystem::path plot_timeline(const std::filesystem::path& png,
                                    const std::vector<base::Timeline::Span>& spans,
                                    std::string_view title) {
  std::vector<std::string> lanes;
  const auto used = [&](std::string_view lane) {
    return std::ranges::any_of(spans, [&](const auto& span) { return span.lane == lane; });
  };
  for (std::string_view lane : kLaneOrder)
    if (used(lane)) lanes.emplace_back(lane);
  for (const base::Timeline::Span& span : spans)
    if (std::ranges::find(lanes, span.lane) == lanes.end()) lanes.push_back(span.lane);
  std::map<std::string, int> row;
  for (std::size_t i = 0; i < lanes.size(); ++i)
    row[lanes[i]] = static_cast<int>(i);
  double end_s = 0;
  for (const base::Timeline::Span& span : spans)
    end_s = std::max(end_s, static_cast<double>(span.end_ns) / 1e9);

  std::filesystem::path table = png;
  table.replace_extension(".tsv");
  {
    std::ofstream out(table, std::ios::trunc);
    out << "# row\tkind\tbegin_s\tend_s\tlane\tlabel\n";
    for (const base::Timeline::Span& span : spans) {
      out << row[span.lane] << '\t' << kind_of(span) << '\t'
          << static_cast<double>(span.begin_ns) / 1e9 << '\t'
          << static_cast<double>(span.end_ns) / 1e9 << '\t' << span.lane << '\t' << span.label
          << '\n';
    }
  }
  std::filesystem::path script = png;
  script.replace_extension(".gp");
  {
    std::ofstream out(script, std::ios::trunc);
    out << "set terminal pngcairo size 1400," << 160 + 46 * lanes.size() << " noenhanced\n"
        << "set output '" << png.filename().string() << "'\n"
        << "set title '" << title << "'\nset xlabel 'seconds'\n"
        << "set datafile separator '\\t'\nset yrange [" << lanes.size() << "-0.5:-0.5]\n"
        << "set xrange [0:" << end_s << "]\nset grid xtics\nset key outside right top\n"
        << "set style fill solid 1.0 noborder\nset ytics (";
    for (std::size_t i = 0; i < lanes.size(); ++i)
      out << (i > 0 ? ", " : "") << "'" << lanes[i] << "' " << i;
    out << ")\n";
    for (std::size_t k = 0; k < kKinds.size(); ++k)
      out << "set linetype " << k + 1 << " lc rgb '" << kKinds[k].colour << "'\n";
    // One plot per kind, so that the key names the colours.
    out << "plot ";
    for (std::size_t k = 0; k < kKinds.size(); ++k) {
      out << (k > 0 ? ", " : "") << "'" << table.filename().string()
          << "' using (($3+$4)/2):($2 == " << k
          << " ? $1 : NaN):(($4-$3)/2):(0.36) with boxxyerror lt " << k + 1 << " title '"
          << kKinds[k].name << "'";
    }
    out << "\n";
  }
  return run_gnuplot(script, table, "the timeline's spans") ? png : std::filesystem::path();
}

}  // namespace strata::tools
