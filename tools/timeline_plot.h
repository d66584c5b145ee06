#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "base/timeline.h"

namespace strata::tools {

// `strata train --timeline F.png`: the spans of one step, one row per lane (the host thread,
// each stream, the optimizer, NVMe reads and writes), coloured by kind (kernel tasks, copies,
// waits, transfers). Writes the spans to F with the extension .tsv (lane, kind, begin and end in
// seconds, label) and draws F with gnuplot; F's folder exists (`strata train` makes it before the
// first step). Returns F, or "" with a warning when gnuplot is missing or fails (the table is
// written either way).
std::filesystem::path plot_timeline(const std::filesystem::path& png,
                                    const std::vector<base::Timeline::Span>& spans,
                                    std::string_view title);

}  // namespace strata::tools
