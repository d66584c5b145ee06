#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "base/timeline.h"

namespace strata::tools {

// `strata train --timeline F.png`: the spans of one step, one row per lane (the host thread,
// each stream, the optimizer, NVMe reads and writes), coloured by kind (kernel tasks, copies,
// waits, transfers). Writes the spans to F with the extension .tsv (lane, kind, begin and end in
// seconds, label) and the gnuplot script that draws F to F with the extension .gp, and runs it;
// the script names both files by their names alone, so a copy of the folder redraws F elsewhere
// (`cd folder && gnuplot F.gp`: how scripts/gpu_check.sh plot draws a GPU machine's timelines).
// F's folder exists (`strata train` makes it before the first step). Returns F, or "" with a
// warning when gnuplot is missing or fails (the table and script are written either way).
std::filesystem::path plot_timeline(const std::filesystem::path& png,
                                    const std::vector<base::Timeline::Span>& spans,
                                    std::string_view title);

}  // namespace strata::tools
