// strata: one binary, one subcommand per job. Only this file turns errors into exit statuses:
// 0 ok, 1 the work failed, 2 bad usage or bad config.
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "base/error.h"
#include "base/log.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata: train models larger than GPU memory (ZeRO-3 offload to CPU and NVMe)"};
  app.set_version_flag("--version", "strata 0.1.0");
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.parse_complete_callback(
      [&log_level] { base::set_log_level(spdlog::level::from_str(log_level)); });

  tools::CommandContext context;
  tools::add_train_command(app, context);
  tools::add_eval_command(app, context);
  tools::add_ckpt_command(app, context);
  tools::add_report_command(app, context);
  tools::add_estimate_command(app, context);
  tools::add_config_command(app, context);
  tools::add_bench_command(app, context);
  tools::add_io_bench_command(app, context);
  tools::add_io_tune_command(app, context);
  tools::add_tokenize_command(app, context);
  tools::add_generate_command(app, context);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int status = app.exit(error);
    return status == 0 ? 0 : 2;
  } catch (const UserError& error) {
    std::fprintf(stderr, "strata: error: %s\n", error.what());
    if (!error.fix().empty()) std::fprintf(stderr, "  fix: %s\n", error.fix().c_str());
    return error.exit_status();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "strata: error: %s\n", error.what());
    return 1;
  }
  return context.exit_status;
}
