// strata eval: the mean loss and perplexity of the model a config describes (its pretrained
// weights, its fresh ones, or a checkpoint's) over consecutive windows of a token file or of the
// validation split.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "engine/engine.h"
#include "gpu/process_group.h"
#include "models/data/text_tokens.h"
#include "models/data/token_file.h"
#include "models/model_plan.h"
#include "tools/built_engine.h"
#include "tools/commands.h"
#include "tools/run_setup.h"

namespace strata::tools {
namespace {

struct EvalOptions {
  std::string config_path;
  std::string data_path;   // "" = the config's validation split
  std::string checkpoint;  // "" = the model's own: from_pretrained's, or strata.seed's
  bool json = false;
};

struct EvalResult {
  double loss = 0;  // mean over every target token in the loss
  std::int64_t tokens = 0;
  std::int64_t loss_tokens = 0;  // of those, the ones in the loss (a negative target is not)
  std::int64_t windows = 0;
};

// A sum of evaluated losses and what it weighs, in windows: an evaluation of k windows weighs
// k x its share of targets in the loss (exactly k without a mask, so that the sums keep the bits
// of the plain mean over windows), so the total over the weight is the mean over the split's
// targets in the loss.
struct WeightedLoss {
  double sum = 0;
  double weight = 0;
};

double loss_share(const engine::EvalStats& stats) {
  return stats.tokens > 0
             ? static_cast<double>(stats.loss_tokens) / static_cast<double>(stats.tokens)
             : 0.0;
}

std::int64_t targets_in_loss(std::span<const std::int32_t> targets) {
  return std::count_if(targets.begin(), targets.end(), [](std::int32_t t) { return t >= 0; });
}

// The last partial micro-batch of `tail` windows is padded with copies of its first window x,
// and one micro-batch of copies of x alone measures x, so that the tail's own sum is exact:
// B mean(tail + copies) - (B - r) mean(x), each weighed by its share of targets in the loss.
WeightedLoss evaluate_tail(engine::Engine& engine, std::span<std::int32_t> in,
                           std::span<std::int32_t> out, int tail, int rows,
                           std::size_t row_tokens) {
  auto fill_with_first = [&](int from_row) {
    for (int r = from_row; r < rows; ++r) {
      const std::size_t at = static_cast<std::size_t>(r) * row_tokens;
      std::copy_n(in.begin(), row_tokens, in.begin() + static_cast<std::ptrdiff_t>(at));
      std::copy_n(out.begin(), row_tokens, out.begin() + static_cast<std::ptrdiff_t>(at));
    }
  };
  fill_with_first(tail);
  const engine::EvalStats padded = engine.evaluate_batch(in, out);
  fill_with_first(1);
  const engine::EvalStats first_alone = engine.evaluate_batch(in, out);
  const double padded_weight = rows * loss_share(padded);
  const double copies_weight = (rows - tail) * loss_share(first_alone);
  return {padded.loss * padded_weight - first_alone.loss * copies_weight,
          padded_weight - copies_weight};
}

// Window j of `split` has inputs [jT, jT + T) and targets one later, for every j that fits. The
// engine's micro-batch has B rows: whole micro-batches go up to gradient_accumulation_steps at a
// time, then the last partial one (evaluate_tail).
EvalResult evaluate_windows(engine::Engine& engine, models::TokenView split,
                            const models::ModelPlan& plan, std::int64_t accumulation) {
  const auto seq_len = static_cast<int>(plan.seq_len());
  const auto rows = static_cast<int>(plan.batch());
  const std::int64_t windows = models::window_count(split, seq_len);
  const auto row_tokens = static_cast<std::size_t>(seq_len);
  const std::size_t micro_tokens = static_cast<std::size_t>(rows) * row_tokens;
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(accumulation) * micro_tokens);
  std::vector<std::int32_t> targets(inputs.size());

  EvalResult result;
  WeightedLoss total;
  const std::int64_t whole = windows / rows;
  for (std::int64_t done = 0; done < whole;) {
    const std::int64_t batches = std::min(accumulation, whole - done);
    const auto count = static_cast<std::size_t>(batches) * micro_tokens;
    models::copy_windows(split, done * rows, static_cast<int>(batches) * rows, seq_len,
                         std::span(inputs).first(count), std::span(targets).first(count));
    const engine::EvalStats stats =
        engine.evaluate_batch(std::span(inputs).first(count), std::span(targets).first(count));
    const double weight = static_cast<double>(batches * rows) * loss_share(stats);
    total.sum += stats.loss * weight;
    total.weight += weight;
    result.loss_tokens += targets_in_loss(std::span(targets).first(count));
    done += batches;
  }
  const auto tail = static_cast<int>(windows - whole * rows);
  if (tail > 0) {
    std::span<std::int32_t> in = std::span(inputs).first(micro_tokens);
    std::span<std::int32_t> out = std::span(targets).first(micro_tokens);
    const std::size_t tail_tokens = static_cast<std::size_t>(tail) * row_tokens;
    models::copy_windows(split, whole * rows, tail, seq_len, in.first(tail_tokens),
                         out.first(tail_tokens));
    result.loss_tokens += targets_in_loss(out.first(tail_tokens));
    const WeightedLoss last = evaluate_tail(engine, in, out, tail, rows, row_tokens);
    total.sum += last.sum;
    total.weight += last.weight;
  }
  result.windows = windows;
  result.tokens = windows * seq_len;
  result.loss = result.loss_tokens > 0 ? total.sum / total.weight : 0.0;
  return result;
}

// What eval reads: --data, the whole file; else the validation split of strata.data (or of the
// built-in corpus). `split` views the storage beside it.
struct EvalData {
  models::TokenDataset dataset;
  models::TokenFile file;
  models::TokenView split;
  std::string source;
};

void open_eval_data(const EvalOptions& options, const engine::Config& config,
                    const models::ModelPlan& plan, EvalData& data) {
  if (options.data_path.empty()) {
    data.dataset = load_data(config, plan);
    data.split = data.dataset.validation();
    data.source = fmt::format("the validation split of {}", data.dataset.source);
    return;
  }
  TextTokenizers tokenizers;
  const models::TextTokenizing text = text_tokenizing(config, plan, tokenizers);
  data.file = models::open_token_file(options.data_path, config.strata.data.dtype, "--data", text);
  models::check_tokenizer(data.file, plan.vocab(), config.strata.model.hf_config);
  models::check_token_ids(data.file, static_cast<int>(plan.vocab()), options.data_path);
  data.split = data.file.tokens;
  data.source = fmt::format("{} ({})", data.file.path.string(), data.file.format);
}

int run_eval(const EvalOptions& options) {
  gpu::World world;
  engine::LoadedConfig loaded = load_run_config(options.config_path, world.world_size());
  const engine::Config& config = loaded.config;
  const bool leader = world.rank() == 0;
  for (const std::string& warning : loaded.warnings)
    if (leader) base::logger("tools").warn("{}", warning);
  const models::ModelPlan plan = plan_model(config);

  EvalData data;
  open_eval_data(options, config, plan, data);
  const models::TokenView split = data.split;
  const std::string& source = data.source;
  if (models::window_count(split, static_cast<int>(plan.seq_len())) == 0) {
    throw UserError(fmt::format("{} holds {} tokens, fewer than one window of seq_len {} + 1",
                                source, split.size(), plan.seq_len()),
                    "evaluate a longer file, or a model with a shorter strata.model.seq_len", 2);
  }

  BuiltEngine built(world, open_run_device(config, world), config, plan);
  engine::Engine& engine = built.engine;
  std::string weights =
      plan.from_pretrained.empty()
          ? fmt::format("fresh weights (strata.seed {})", config.strata.seed)
          : fmt::format("{} (strata.model.from_pretrained)", plan.from_pretrained);
  if (!options.checkpoint.empty()) {
    const engine::CheckpointInfo info = engine.load_checkpoint(options.checkpoint);
    weights = fmt::format("{} (step {})", info.path.string(), info.step);
  }

  // Every rank evaluates the same windows (ZeRO-3 gathers need every rank in each forward).
  const EvalResult result =
      evaluate_windows(engine, split, plan, config.batch.gradient_accumulation_steps);
  if (!leader) return 0;
  const double perplexity = std::exp(result.loss);
  if (options.json) {
    nlohmann::json out = {{"loss", result.loss},
                          {"perplexity", perplexity},
                          {"tokens", result.tokens},
                          {"loss_tokens", result.loss_tokens},
                          {"windows", result.windows},
                          {"seq_len", plan.seq_len()},
                          {"data", source},
                          {"weights", weights}};
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("strata eval\n  data     {}\n  weights  {}\n  windows  {} of {} tokens\n", source,
               weights, result.windows, plan.seq_len());
    fmt::print("  loss     {:.6f} nats/token over {} tokens{}, perplexity {:.4f}\n", result.loss,
               result.loss_tokens,
               result.loss_tokens == result.tokens
                   ? ""
                   : fmt::format(" in the loss (of {})", result.tokens),
               perplexity);
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<EvalOptions>();
  auto* command = app.add_subcommand(
      "eval",
      "Mean loss and perplexity over consecutive windows of a token file or the validation split");
  command
      ->add_option("--config", options->config_path,
                   "DeepSpeed JSON config or Accelerate config (YAML) (default: the built-in "
                   "demo)")
      ->check(CLI::ExistingFile);
  command->add_option("--data", options->data_path,
                      "Token file to evaluate, whole (default: the config's validation split); "
                      "strata.data.dtype applies");
  command->add_option("--checkpoint", options->checkpoint,
                      "Evaluate this checkpoint's weights: a save directory (its latest) or "
                      "DIR/TAG (default: the model's own, from_pretrained's or strata.seed's)");
  command->add_flag("--json", options->json,
                    "Print one JSON object: loss, perplexity, tokens, ...");
  command->callback([options, &context] { context.exit_status = run_eval(*options); });
}

}  // namespace strata::tools
