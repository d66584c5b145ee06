// strata generate: text from a model folder or a checkpoint, streamed as it is made, from any
// placement of the weights a config gives (on the device, in CPU memory, on NVMe).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/save_directory.h"
#include "engine/config/config.h"
#include "gpu/process_group.h"
#include "models/generate/generation_config.h"
#include "models/generate/generator.h"
#include "models/model_plan.h"
#include "tools/built_engine.h"
#include "tools/commands.h"
#include "tools/generate_prompts.h"
#include "tools/run_setup.h"

namespace strata::tools {
namespace {

namespace generate = models::generate;

// New tokens when neither --max-new-tokens nor generation_config.json says, as far as the
// context allows.
constexpr std::int64_t kDefaultNewTokens = 128;

struct GenerateOptions {
  std::string model;
  std::string checkpoint;
  std::string config_path;
  std::string prompt;
  std::string prompt_ids;
  std::string chat;
  std::string prompts_file;
  std::int64_t max_new_tokens = 0;  // 0: not given
  double temperature = -1;          // < 0: not given
  std::int64_t top_k = -1;          // < 0: not given
  double top_p = -1;
  double min_p = -1;
  std::uint64_t seed = 0;
  std::vector<std::string> stops;
  bool json = false;
};

// The config the run starts from: --config's, else the checkpoint's (its manifest keeps the
// resolved config of the run that saved it), else every default; with --model as its model.
nlohmann::json base_config(const GenerateOptions& options, int world_size) {
  nlohmann::json config;
  if (!options.config_path.empty()) {
    config = engine::to_json(engine::load_config_file(options.config_path, world_size).config);
  } else if (!options.checkpoint.empty()) {
    const auto checkpoint = engine::checkpoint::resolve_checkpoint(options.checkpoint);
    config = engine::checkpoint::read_manifest(checkpoint).config;
  } else {
    config = {{"train_micro_batch_size_per_gpu", 1}};
  }
  if (!options.model.empty()) config["strata"]["model"] = {{"from_pretrained", options.model}};
  return config;
}

std::string config_source(const GenerateOptions& options) {
  if (!options.config_path.empty()) return options.config_path;
  if (!options.checkpoint.empty()) return options.checkpoint + "'s manifest.json";
  return "--model " + options.model;
}

// The engine runs one micro-batch of `rows` sequences of `seq_len` tokens, the prefill's (a model
// folder's seq_len may be anything up to its context; a built-in model's is its context).
engine::Config generation_config(nlohmann::json config, const std::string& source, int world_size,
                                 std::int64_t rows, std::int64_t seq_len) {
  config["train_micro_batch_size_per_gpu"] = rows;
  config["gradient_accumulation_steps"] = 1;
  config["train_batch_size"] = rows * world_size;
  if (config["strata"]["model"].contains("from_pretrained") ||
      config["strata"]["model"].contains("config"))
    config["strata"]["model"]["seq_len"] = seq_len;
  return engine::parse_config_text(config.dump(), source, world_size).config;
}

std::int64_t context_of(const engine::ModelConfig& model) {
  return model.positions > 0 ? model.positions : model.seq_len;
}

std::vector<PromptInput> prompt_inputs(const GenerateOptions& options) {
  const int given =
      static_cast<int>(!options.prompt.empty()) + static_cast<int>(!options.prompt_ids.empty()) +
      static_cast<int>(!options.chat.empty()) + static_cast<int>(!options.prompts_file.empty());
  if (given != 1) {
    throw UserError(
        fmt::format("strata generate takes one source of prompts; {} were given", given),
        "give one of --prompt TEXT, --prompt-ids 1,2,3, --chat FILE.json or --prompts "
        "FILE.jsonl",
        2);
  }
  if (!options.prompts_file.empty()) return prompts_from_file(options.prompts_file);
  if (!options.prompt_ids.empty()) return {prompt_from_ids(options.prompt_ids)};
  if (!options.chat.empty()) return {prompt_from_chat_file(options.chat)};
  return {PromptInput{
      .text = options.prompt, .ids = {}, .messages = {}, .tools = {}, .origin = "--prompt"}};
}

// The folder's defaults with the command line's choices over them: a top-k, top-p or min-p, or
// a temperature above 0, asks for sampling; --temperature 0 is greedy whatever else is given.
generate::SamplingOptions sampling_for(const GenerateOptions& options,
                                       generate::SamplingOptions sampling) {
  if (options.top_k >= 0) sampling.top_k = options.top_k;
  if (options.top_p >= 0) sampling.top_p = options.top_p;
  if (options.min_p >= 0) sampling.min_p = options.min_p;
  if (options.top_k >= 0 || options.top_p >= 0 || options.min_p >= 0) sampling.sample = true;
  if (options.temperature > 0) {
    sampling.temperature = options.temperature;
    sampling.sample = true;
  } else if (options.temperature == 0) {
    sampling.sample = false;
  }
  return sampling;
}

// Each prompt's request, refused before any work when it does not fit the model's context.
std::vector<generate::GenerationRequest> make_requests(const GenerateOptions& options,
                                                       const std::vector<PromptInput>& inputs,
                                                       const PromptEncoding& encoding,
                                                       const generate::GenerationDefaults& defaults,
                                                       std::int64_t context) {
  std::vector<generate::GenerationRequest> requests;
  for (const PromptInput& input : inputs) {
    generate::GenerationRequest request;
    request.prompt = encode_prompt(input, encoding);
    request.sampling = sampling_for(options, defaults.sampling);
    request.seed = options.seed;
    request.eos_ids = defaults.eos_token_ids;
    // A conversation's answer ends at the template's end of turn.
    if (input.messages && encoding.chat != nullptr && encoding.chat->end_of_turn() &&
        std::ranges::find(request.eos_ids, *encoding.chat->end_of_turn()) == request.eos_ids.end())
      request.eos_ids.push_back(*encoding.chat->end_of_turn());
    request.stop_strings = options.stops;
    const auto prompt = std::ssize(request.prompt);
    request.max_new_tokens =
        options.max_new_tokens > 0
            ? options.max_new_tokens
            : std::clamp<std::int64_t>(context - prompt, 1,
                                       defaults.max_new_tokens.value_or(kDefaultNewTokens));
    generate::check_fits(prompt, request.max_new_tokens, context);
    requests.push_back(std::move(request));
  }
  return requests;
}

nlohmann::ordered_json result_json(const generate::Generation& generation,
                                   std::int64_t prompt_tokens, const generate::Generated& batch,
                                   bool has_text) {
  return {{"ids", generation.ids},
          {"text", has_text ? nlohmann::ordered_json(generation.text) : nlohmann::ordered_json()},
          {"prompt_tokens", prompt_tokens},
          {"new_tokens", generation.ids.size()},
          {"stop", generate::to_string(generation.reason)},
          {"prefill_s", batch.prefill_s},
          {"decode_tokens_per_s", batch.decode_tokens_per_s()}};
}

// What one run generates for: the requests, the model's text, and the config sized for them.
struct GenerationPlan {
  std::vector<generate::GenerationRequest> requests;
  generate::IdsToText text;
  engine::Config config;
  std::int64_t positions = 0;  // the model's context
};

GenerationPlan plan_generation(const GenerateOptions& options, int world_size,
                               TextTokenizers& tokenizers) {
  const nlohmann::json base = base_config(options, world_size);
  const std::string source = config_source(options);
  const engine::Config as_given = engine::parse_config_text(base.dump(), source, world_size).config;
  const models::ModelPlan shape = plan_model(as_given);
  const models::TextTokenizing text = text_tokenizing(as_given, shape, tokenizers);
  const std::filesystem::path hf_config = as_given.strata.model.hf_config;
  PromptEncoding encoding{.tokenizer = text.tokenizer(),
                          .chat = nullptr,
                          .bytes = hf_config.empty(),
                          .vocab = shape.vocab(),
                          .model = hf_config.empty() ? "the built-in GPT" : hf_config.string()};
  if (encoding.tokenizer != nullptr) encoding.chat = text.chat();
  const generate::GenerationDefaults defaults =
      hf_config.empty() ? generate::GenerationDefaults{}
                        : generate::read_generation_config(hf_config.parent_path());
  GenerationPlan plan;
  plan.requests = make_requests(options, prompt_inputs(options), encoding, defaults,
                                context_of(as_given.strata.model));
  plan.text = {.tokenizer = encoding.tokenizer, .bytes = encoding.bytes};
  // The micro-batch holds the prefill, as long as the longest prompt; the KV cache the new tokens.
  std::int64_t seq_len = 0;
  for (const generate::GenerationRequest& request : plan.requests)
    seq_len = std::max(seq_len, std::ssize(request.prompt));
  plan.config = generation_config(base, source, world_size, std::ssize(plan.requests), seq_len);
  plan.positions = context_of(as_given.strata.model);
  return plan;
}

void print_outcome(const GenerationPlan& plan, const generate::Generated& generated, bool json) {
  const bool batch = plan.requests.size() > 1;
  for (std::size_t i = 0; i < generated.sequences.size(); ++i) {
    const generate::Generation& sequence = generated.sequences[i];
    const auto prompt_tokens = std::ssize(plan.requests[i].prompt);
    if (json || batch) {
      fmt::print("{}\n", result_json(sequence, prompt_tokens, generated, plan.text.has_text())
                             .dump(batch ? -1 : 2));
      continue;
    }
    if (!plan.text.has_text()) fmt::print("{}", fmt::join(sequence.ids, " "));
    fmt::print("\n");
    std::fflush(stdout);
    std::fprintf(stderr,
                 "strata generate: stopped at %s after %zu new tokens (prompt %td tokens, prefill "
                 "%.3f s, decode %.1f tokens/s)\n",
                 std::string(generate::to_string(sequence.reason)).c_str(), sequence.ids.size(),
                 prompt_tokens, generated.prefill_s, generated.decode_tokens_per_s());
  }
}

int run_generate(const GenerateOptions& options) {
  gpu::World world;
  const bool leader = world.rank() == 0;
  TextTokenizers tokenizers;
  const GenerationPlan plan = plan_generation(options, world.world_size(), tokenizers);
  const models::ModelPlan shape = plan_model(plan.config);
  BuiltEngine built(world, open_run_device(plan.config, world), plan.config, shape);
  if (!options.checkpoint.empty())
    static_cast<void>(built.engine.load_checkpoint(options.checkpoint));

  // One prompt streams its text as it comes, unless the answer is one JSON document.
  const bool stream = leader && !options.json && plan.requests.size() == 1;
  const generate::OnText show = [](std::size_t, std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  const generate::Generated generated =
      generate::generate_with_cache(built.engine, {shape.batch(), shape.seq_len(), plan.positions},
                                    plan.requests, plan.text, stream ? show : generate::OnText{});
  if (leader) print_outcome(plan, generated, options.json);
  return 0;
}

void add_prompt_options(CLI::App& command, GenerateOptions& options) {
  command.add_option("--prompt", options.prompt,
                     "Text to continue, made ids by the model's tokenizer");
  command.add_option("--prompt-ids", options.prompt_ids,
                     "Token ids to continue, separated by commas (1,2,3): no tokenizer needed");
  command.add_option("--chat", options.chat,
                     "A conversation to answer: a JSON file of messages ([{\"role\": \"user\", "
                     "\"content\": ...}]), rendered with the model's chat template");
  command.add_option("--prompts", options.prompts_file,
                     "Many prompts as one batch: a JSONL file of {\"prompt\": ...}, "
                     "{\"prompt_ids\": [...]} or {\"messages\": [...]}; one JSON line out each");
}

void add_sampling_options(CLI::App& command, GenerateOptions& options) {
  command
      .add_option("--max-new-tokens", options.max_new_tokens,
                  "New tokens at most (default: generation_config.json's max_new_tokens, else "
                  "128, as far as the context allows)")
      ->check(CLI::PositiveNumber);
  command
      .add_option("--temperature", options.temperature,
                  "Sample at this temperature; 0 is greedy (default: generation_config.json's, "
                  "else greedy)")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--top-k", options.top_k, "Sample from the K most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  command
      .add_option("--top-p", options.top_p,
                  "Sample from the most likely tokens holding probability P (0 < P <= 1)")
      ->check(CLI::Range(0.0, 1.0));
  command
      .add_option("--min-p", options.min_p,
                  "Sample from tokens at least P times as likely as the most likely (0 to 1)")
      ->check(CLI::Range(0.0, 1.0));
  command.add_option("--seed", options.seed, "Seed of the sampler: the same seed, the same text");
  command.add_option("--stop", options.stops, "Stop where the text shows this string (repeatable)")
      ->check(CLI::Validator(
          [](const std::string& stop) {
            return stop.empty() ? "an empty stop string stops at once: give at least one character"
                                : std::string();
          },
          "TEXT"));
}

}  // namespace

void add_generate_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<GenerateOptions>();
  auto* command = app.add_subcommand(
      "generate", "Text from a model folder or a checkpoint, streamed as it is made");
  auto* model = command
                    ->add_option("--model", options->model,
                                 "A Hugging Face model folder (config.json, weights, tokenizer)")
                    ->check(CLI::ExistingDirectory);
  auto* checkpoint = command->add_option(
      "--checkpoint", options->checkpoint,
      "A strata checkpoint's weights: a save directory (its latest) or DIR/TAG");
  model->excludes(checkpoint);
  command
      ->add_option("--config", options->config_path,
                   "DeepSpeed JSON or Accelerate YAML: where the weights live (offload_param) "
                   "and the precision (default: the checkpoint's own config, else on the device "
                   "in fp32)")
      ->check(CLI::ExistingFile);
  add_prompt_options(*command, *options);
  add_sampling_options(*command, *options);
  command->add_flag("--json", options->json,
                    "Print one JSON document at the end: ids, text, prompt_tokens, new_tokens, "
                    "stop, prefill_s, decode_tokens_per_s");
  command->callback([options, &context, model, checkpoint] {
    if (model->count() == 0 && checkpoint->count() == 0) {
      throw UserError("strata generate needs a model",
                      "give --model DIR (a Hugging Face folder) "
                      "or --checkpoint DIR (a strata checkpoint)",
                      2);
    }
    context.exit_status = run_generate(*options);
  });
}

}  // namespace strata::tools
