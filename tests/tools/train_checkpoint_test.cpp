// `strata train --save-dir/--resume` and `strata ckpt`, run as a user runs them: a resumed run
// continues the uninterrupted one bit for bit (in memory and with its states on NVMe), --keep-last
// prunes, SIGTERM and SIGINT save and exit 143 and 130, inspect and export read what train saved,
// and every damaged file, wrong directory, changed config and busy swap path is refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "cpu_adam/half.h"
#include "engine/checkpoint/safetensors.h"
#include "tests/tools/run_strata.h"
#include "tests/tools/spawn_strata.h"

namespace strata::tools::testing {
namespace {

namespace fs = std::filesystem;
using engine::checkpoint::Dtype;
using engine::checkpoint::SafetensorsFile;
using engine::checkpoint::TensorEntry;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr const char* kJobName = "train-checkpoint-test";
constexpr std::int64_t kLongRun = 100000;  // never reached: these runs are stopped

// The TinyConfig model of train_command_test.cpp (L1 H1 C16 T8 V256, a step well under a
// millisecond), at stage 0 in memory or at stage 3 with parameters and optimizer states on NVMe.
struct CheckpointConfig {
  int d_model = 16;
  std::string optimizer = "AdamW";
  std::int64_t steps_per_print = 1;
  fs::path nvme_path;  // empty: stage 0, nothing offloaded

  std::string json() const {
    std::string zero = R"({"stage": 0})";
    if (!nvme_path.empty()) {
      zero = fmt::format(R"({{"stage": 3, "sub_group_size": 4e3,
    "offload_param": {{"device": "nvme", "nvme_path": "{0}", "pin_memory": false}},
    "offload_optimizer": {{"device": "nvme", "nvme_path": "{0}", "pin_memory": false}}}})",
                         nvme_path.string());
    }
    return fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "steps_per_print": {},
  "optimizer": {{"type": "{}", "params": {{"lr": 1e-3}}}},
  "zero_optimization": {},
  "strata": {{
    "model": {{"n_layer": 1, "n_head": 1, "d_model": {}, "seq_len": 8, "vocab": 256}},
    "train_steps": 1, "seed": 7, "job_name": "{}"
  }}
}})",
                       steps_per_print, optimizer, zero, d_model, kJobName);
  }
};

std::string tag(std::int64_t step) {
  return fmt::format("global_step{}", step);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// D/latest without its newline.
std::string latest(const fs::path& save) {
  std::string text = read_text(save / "latest");
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  return text;
}

// The names of the entries of `directory` other than `latest`, sorted (hidden ones included, so
// that a leftover .TAG.partial or .TAG.pruning shows).
std::vector<std::string> tags_in(const fs::path& directory) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (name != "latest") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// What a metrics line says about training, without its timings and memory peaks: these must be
// the same, bit for bit, in a resumed run and in the run it continues.
json training_fields(const json& line) {
  json kept = json::object();
  for (const char* key : {"step", "loss", "lr", "grad_norm", "loss_scale", "skipped", "tokens",
                          "loss_tokens", "val_loss"}) {
    if (line.contains(key)) kept[key] = line[key];
  }
  return kept;
}

std::vector<json> metrics_lines(const fs::path& path) {
  std::vector<json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    lines.push_back(training_fields(json::parse(line)));
  return lines;
}

// "loss A -> B, validation V" of the summary: B and V as printed.
std::string final_losses(const std::string& out) {
  std::smatch match;
  static const std::regex summary("loss [0-9.]+ -> ([0-9.]+), validation ([0-9.]+)");
  if (!std::regex_search(out, match, summary)) return "no summary in:\n" + out;
  return match[1].str() + " " + match[2].str();
}

void flip_last_byte(const fs::path& path) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-1, std::ios::end);
  char byte = 0;
  file.get(byte);
  file.seekp(-1, std::ios::end);
  file.put(static_cast<char>(byte ^ 0x5a));
}

std::vector<float> floats_of(const SafetensorsFile& file, const TensorEntry& tensor) {
  std::span<const std::byte> bytes = file.data(tensor);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

class TrainCheckpoint : public ::testing::Test {
 protected:
  TrainCheckpoint() { write_config(CheckpointConfig{}); }

  void write_config(const CheckpointConfig& config) {
    config_ = dir_.write("config.json", config.json());
  }

  // `strata train --config config.json --out DIR/out --steps N` and `more`.
  std::vector<std::string> train_arguments(std::int64_t steps,
                                           const std::vector<std::string>& more = {}) const {
    std::vector<std::string> arguments = {
        "train",   "--config",           config_.string(), "--out", (dir_.path() / "out").string(),
        "--steps", std::to_string(steps)};
    arguments.insert(arguments.end(), more.begin(), more.end());
    return arguments;
  }
  RunResult train(std::int64_t steps, const std::vector<std::string>& more = {}) const {
    return run_strata(train_arguments(steps, more));
  }

  // Trains `steps` steps saving into save_ after the last one, and returns its checkpoint.
  fs::path saved_checkpoint(std::int64_t steps) const {
    RunResult result = train(steps, {"--save-dir", save_.string()});
    EXPECT_EQ(result.exit_status, 0) << result.err;
    return save_ / tag(steps);
  }

  json inspect_json(const fs::path& path) const {
    RunResult result = run_strata({"ckpt", "inspect", path.string(), "--json"});
    EXPECT_EQ(result.exit_status, 0) << result.err;
    return json::parse(result.out);
  }

  // An uninterrupted run of 8 steps, and one of 4 steps saved at step 4 then resumed to step 8
  // with the same metrics file: the resumed run appends steps 5 to 8, and those, its summary's
  // last loss and validation are the uninterrupted run's.
  void expect_resume_continues_the_run(const std::string& placement) const {
    const std::vector<std::string> evaluate = {"--eval-every", "4"};
    std::vector<std::string> whole_arguments = evaluate;
    whole_arguments.insert(whole_arguments.end(),
                           {"--metrics", (dir_.path() / "whole.jsonl").string()});
    RunResult whole = train(8, whole_arguments);
    ASSERT_EQ(whole.exit_status, 0) << whole.err;
    EXPECT_THAT(whole.out, HasSubstr(placement));

    const std::string split_metrics = (dir_.path() / "split.jsonl").string();
    std::vector<std::string> first_arguments = evaluate;
    first_arguments.insert(first_arguments.end(), {"--metrics", split_metrics, "--save-dir",
                                                   save_.string(), "--save-every", "4"});
    RunResult first = train(4, first_arguments);
    ASSERT_EQ(first.exit_status, 0) << first.err;
    EXPECT_EQ(latest(save_), tag(4));

    std::vector<std::string> resumed_arguments = evaluate;
    resumed_arguments.insert(resumed_arguments.end(),
                             {"--metrics", split_metrics, "--resume", save_.string()});
    RunResult resumed = train(8, resumed_arguments);
    ASSERT_EQ(resumed.exit_status, 0) << resumed.err;
    EXPECT_THAT(resumed.err,
                HasSubstr(fmt::format("resumed from {} (step 4)", (save_ / tag(4)).string())));
    EXPECT_THAT(resumed.err, HasSubstr("continuing with batch 5"));
    EXPECT_THAT(resumed.out, HasSubstr("trained 4 steps"));
    EXPECT_EQ(final_losses(resumed.out), final_losses(whole.out)) << resumed.out << whole.out;

    const std::vector<json> expected = metrics_lines(dir_.path() / "whole.jsonl");
    const std::vector<json> split = metrics_lines(split_metrics);
    ASSERT_EQ(expected.size(), 8u);
    ASSERT_EQ(split.size(), 8u) << read_text(split_metrics);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(split[i], expected[i]) << "metrics line " << i + 1;
    }
  }

  TempDir dir_;
  fs::path config_;
  fs::path save_ = dir_.path() / "ckpt";
};

// 1. Resuming at the halfway step gives the uninterrupted run's losses, to the last bit.

TEST_F(TrainCheckpoint, ResumedRunContinuesTheUninterruptedOneAtStage0) {
  expect_resume_continues_the_run(
      "stage 0: parameters, gradients and optimizer states replicated on the device");
}

TEST_F(TrainCheckpoint, ResumedRunContinuesTheUninterruptedOneWithStatesOnNvme) {
  CheckpointConfig config;
  config.nvme_path = dir_.path() / "swap";
  fs::create_directory(config.nvme_path);
  write_config(config);
  expect_resume_continues_the_run(
      fmt::format("parameters in NVMe under {0}, optimizer states in NVMe under {0}",
                  config.nvme_path.string()));
  // Every run exited cleanly and took its swap files with it.
  EXPECT_TRUE(fs::is_empty(config.nvme_path));
}

// A checkpoint is not tied to the layout that saved it: saved at stage 3 from NVMe, it resumes at
// stage 0 in memory, close to the stage-0 run (the sums may run in another order).
TEST_F(TrainCheckpoint, CheckpointSavedFromNvmeAtStage3ResumesAtStage0) {
  const std::string whole_metrics = (dir_.path() / "whole.jsonl").string();
  RunResult whole = train(6, {"--metrics", whole_metrics});
  ASSERT_EQ(whole.exit_status, 0) << whole.err;

  CheckpointConfig nvme;
  nvme.nvme_path = dir_.path() / "swap";
  fs::create_directory(nvme.nvme_path);
  write_config(nvme);
  RunResult first = train(3, {"--save-dir", save_.string()});
  ASSERT_EQ(first.exit_status, 0) << first.err;
  EXPECT_EQ(inspect_json(save_)["manifest"]["offload_optimizer"], "nvme");

  write_config(CheckpointConfig{});
  const std::string resumed_metrics = (dir_.path() / "resumed.jsonl").string();
  RunResult resumed = train(6, {"--resume", save_.string(), "--metrics", resumed_metrics});
  ASSERT_EQ(resumed.exit_status, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("continuing with batch 4"));
  const std::vector<json> expected = metrics_lines(whole_metrics);
  const std::vector<json> got = metrics_lines(resumed_metrics);
  ASSERT_EQ(got.size(), 3u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["step"], expected[i + 3]["step"]);
    const double loss = expected[i + 3]["loss"].get<double>();
    EXPECT_NEAR(got[i]["loss"].get<double>(), loss, 1e-5 * loss) << "step " << i + 4;
  }
}

// 2. --keep-last.

TEST_F(TrainCheckpoint, KeepLastLeavesTheNewestAndAnOlderTagResumes) {
  const std::string whole_metrics = (dir_.path() / "whole.jsonl").string();
  RunResult whole = train(6, {"--metrics", whole_metrics, "--save-dir", save_.string(),
                              "--save-every", "1", "--keep-last", "2"});
  ASSERT_EQ(whole.exit_status, 0) << whole.err;
  EXPECT_EQ(tags_in(save_), (std::vector<std::string>{tag(5), tag(6)}));
  EXPECT_EQ(latest(save_), tag(6));
  EXPECT_THAT(whole.err, HasSubstr("1 older removed"));

  // The older tag, saving again as it goes: global_step6 is replaced by the same states.
  const std::string resumed_metrics = (dir_.path() / "resumed.jsonl").string();
  RunResult resumed =
      train(6, {"--resume", (save_ / tag(5)).string(), "--metrics", resumed_metrics, "--save-dir",
                save_.string(), "--save-every", "1", "--keep-last", "2"});
  ASSERT_EQ(resumed.exit_status, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("continuing with batch 6"));
  EXPECT_EQ(final_losses(resumed.out), final_losses(whole.out));
  const std::vector<json> expected = metrics_lines(whole_metrics);
  const std::vector<json> got = metrics_lines(resumed_metrics);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.back(), expected.back());
  EXPECT_EQ(tags_in(save_), (std::vector<std::string>{tag(5), tag(6)}));
  EXPECT_EQ(latest(save_), tag(6));
  RunResult verify = run_strata({"ckpt", "inspect", save_.string(), "--verify"});
  EXPECT_EQ(verify.exit_status, 0) << verify.err;
  EXPECT_THAT(verify.out, HasSubstr("checkpoint " + (save_ / tag(6)).string()));
}

// 3. SIGTERM and SIGINT: the step in flight ends, the run saves and exits 128 + the signal.

void expect_signal_saves_and_resumes(int sig, const char* name, const fs::path& save,
                                     const std::vector<std::string>& arguments,
                                     const std::function<RunResult(std::int64_t)>& resume) {
  SpawnedStrata child(arguments);
  // Step 1's line is always printed; the handlers are in place before the first step.
  ASSERT_TRUE(
      child.wait_for_output(fmt::format("step     1/{}", kLongRun), std::chrono::seconds(120)))
      << child.out() << child.err();
  child.signal(sig);
  RunResult stopped = child.wait(std::chrono::seconds(120));
  EXPECT_EQ(stopped.exit_status, 128 + sig) << stopped.err;
  std::smatch match;
  const std::regex summary(fmt::format("stopped by {} after ([0-9]+) steps", name));
  ASSERT_TRUE(std::regex_search(stopped.out, match, summary)) << stopped.out;
  const std::int64_t done = std::stoll(match[1].str());
  EXPECT_GE(done, 1);
  EXPECT_EQ(latest(save), tag(done));
  EXPECT_THAT(stopped.err,
              HasSubstr(fmt::format("saved {} (step {})", (save / tag(done)).string(), done)));
  RunResult verify = run_strata({"ckpt", "inspect", save.string(), "--verify"});
  EXPECT_EQ(verify.exit_status, 0) << verify.err;

  RunResult resumed = resume(done + 2);
  ASSERT_EQ(resumed.exit_status, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr(fmt::format("resumed from {} (step {})",
                                                 (save / tag(done)).string(), done)));
  EXPECT_THAT(resumed.err, HasSubstr(fmt::format("continuing with batch {}", done + 1)));
  EXPECT_THAT(resumed.out, HasSubstr("trained 2 steps"));
}

TEST_F(TrainCheckpoint, SigtermSavesExits143AndTheRunResumesAfterIt) {
  CheckpointConfig config;
  config.steps_per_print = 100;
  write_config(config);
  expect_signal_saves_and_resumes(SIGTERM, "SIGTERM", save_,
                                  train_arguments(kLongRun, {"--save-dir", save_.string()}),
                                  [&](std::int64_t steps) {
                                    return train(steps, {"--resume", save_.string()});
                                  });
}

TEST_F(TrainCheckpoint, SigintSavesExits130AndTheRunResumesAfterIt) {
  CheckpointConfig config;
  config.steps_per_print = 100;
  write_config(config);
  expect_signal_saves_and_resumes(SIGINT, "SIGINT", save_,
                                  train_arguments(kLongRun, {"--save-dir", save_.string()}),
                                  [&](std::int64_t steps) {
                                    return train(steps, {"--resume", save_.string()});
                                  });
}

// 4. ckpt inspect: the manifest as JSON, --verify, and every damage named.

TEST_F(TrainCheckpoint, InspectJsonHoldsTheManifest) {
  const fs::path checkpoint = saved_checkpoint(3);
  for (const fs::path& path : {save_, checkpoint}) {
    SCOPED_TRACE(path.string());
    const json out = inspect_json(path);
    EXPECT_EQ(out["path"], checkpoint.string());
    const json& manifest = out["manifest"];
    EXPECT_EQ(manifest["tag"], tag(3));
    EXPECT_EQ(manifest["step"], 3);
    EXPECT_EQ(manifest["batches"], 3);
    EXPECT_EQ(manifest["world_size"], 1);
    EXPECT_EQ(manifest["zero_stage"], 0);
    EXPECT_EQ(manifest["optimizer"], "AdamW");
    EXPECT_EQ(manifest["config"]["strata"]["model"]["d_model"], 16);
    ASSERT_EQ(manifest["files"].size(), 3u);
    std::vector<std::string> states;
    for (const json& file : manifest["files"]) {
      states.push_back(file["state"].get<std::string>());
      EXPECT_EQ(
          file["bytes"].get<std::int64_t>(),
          static_cast<std::int64_t>(fs::file_size(checkpoint / file["name"].get<std::string>())));
      EXPECT_THAT(file["crc32c"].get<std::string>(), ::testing::MatchesRegex("[0-9a-f]{8}"));
    }
    EXPECT_EQ(states, (std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}));
    EXPECT_FALSE(out.contains("verified_bytes"));
  }
  RunResult verify = run_strata({"ckpt", "inspect", save_.string(), "--verify", "--json"});
  ASSERT_EQ(verify.exit_status, 0) << verify.err;
  EXPECT_GT(json::parse(verify.out)["verified_bytes"].get<std::int64_t>(), 0);
}

// Each damage, to a copy of a good checkpoint: --verify and --resume both refuse it naming the
// file.
TEST_F(TrainCheckpoint, VerifyAndResumeNameAFlippedTruncatedOrMissingFile) {
  const fs::path good = saved_checkpoint(3);
  RunResult verify_good = run_strata({"ckpt", "inspect", good.string(), "--verify"});
  ASSERT_EQ(verify_good.exit_status, 0) << verify_good.err;
  EXPECT_THAT(verify_good.out, HasSubstr("verified: every file's size and CRC32C match"));

  struct Damage {
    const char* name;
    std::function<void(const fs::path&)> apply;
    const char* says;
  };
  const std::vector<Damage> damages = {
      {"flipped", flip_last_byte, "the file is damaged"},
      {"truncated", [](const fs::path& file) { fs::resize_file(file, fs::file_size(file) - 1); },
       "the file is truncated"},
      {"deleted", [](const fs::path& file) { fs::remove(file); }, "but the manifest lists it"},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.name);
    const fs::path copy = dir_.path() / damage.name / tag(3);
    fs::create_directories(copy.parent_path());
    fs::copy(good, copy, fs::copy_options::recursive);
    const fs::path file = copy / "exp_avg.rank00000.safetensors";
    damage.apply(file);

    RunResult verify = run_strata({"ckpt", "inspect", copy.string(), "--verify"});
    EXPECT_EQ(verify.exit_status, 1) << verify.out << verify.err;
    EXPECT_THAT(verify.err, HasSubstr(file.string()));
    EXPECT_THAT(verify.err, HasSubstr(damage.says));
    EXPECT_THAT(verify.err, HasSubstr("fix: resume from another checkpoint"));

    RunResult resumed = train(4, {"--resume", copy.string()});
    EXPECT_NE(resumed.exit_status, 0) << resumed.err;
    EXPECT_THAT(resumed.err, HasSubstr(file.string()));
    EXPECT_THAT(resumed.err, HasSubstr(damage.says));
    EXPECT_THAT(resumed.out, ::testing::Not(HasSubstr("step     4/4")));
  }
}

TEST_F(TrainCheckpoint, DirectoryThatIsNoCheckpointIsRefusedWithWhatToGive) {
  const fs::path empty = dir_.path() / "not-a-checkpoint";
  fs::create_directory(empty);
  const std::string says = fmt::format(
      "no checkpoint at {}: it holds neither `latest` nor manifest.json", empty.string());
  const std::string fix = "fix: give the directory a run saved into (strata train --save-dir)";
  for (const std::vector<std::string>& arguments :
       {std::vector<std::string>{"ckpt", "inspect", empty.string()},
        std::vector<std::string>{"ckpt", "inspect", empty.string(), "--verify"},
        std::vector<std::string>{"ckpt", "export", empty.string(), "--out",
                                 (dir_.path() / "model.safetensors").string()},
        train_arguments(2, {"--resume", empty.string()})}) {
    SCOPED_TRACE(fmt::format("{}", fmt::join(arguments, " ")));
    RunResult result = run_strata(arguments);
    EXPECT_EQ(result.exit_status, 2) << result.err;
    EXPECT_THAT(result.err, HasSubstr(says));
    EXPECT_THAT(result.err, HasSubstr(fix));
  }
  EXPECT_FALSE(fs::exists(dir_.path() / "model.safetensors"));

  const fs::path missing = dir_.path() / "no-such-directory";
  RunResult result = run_strata({"ckpt", "inspect", missing.string()});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr(fmt::format("no checkpoint at {}: it is not a directory",
                                                missing.string())));
  EXPECT_THAT(result.err, HasSubstr("fix: give a save directory"));
}

// 5. ckpt export: every tensor by name and shape, holding the master weights.

TEST_F(TrainCheckpoint, ExportHoldsEveryTensorAndBf16IsTheRoundedFp32) {
  const fs::path checkpoint = saved_checkpoint(3);
  const fs::path fp32_path = dir_.path() / "model.safetensors";
  const fs::path bf16_path = dir_.path() / "model-bf16.safetensors";
  RunResult fp32_run = run_strata({"ckpt", "export", save_.string(), "--out", fp32_path.string()});
  ASSERT_EQ(fp32_run.exit_status, 0) << fp32_run.err;
  EXPECT_THAT(fp32_run.out, HasSubstr("exported 7.54K parameters (16 tensors, fp32)"));
  RunResult bf16_run = run_strata(
      {"ckpt", "export", save_.string(), "--out", bf16_path.string(), "--dtype", "bf16"});
  ASSERT_EQ(bf16_run.exit_status, 0) << bf16_run.err;

  const json manifest = inspect_json(checkpoint)["manifest"];
  const SafetensorsFile fp32 = SafetensorsFile::open(fp32_path);
  const SafetensorsFile bf16 = SafetensorsFile::open(bf16_path);
  EXPECT_EQ(fp32.metadata().at("strata_checkpoint"), tag(3));
  EXPECT_EQ(fp32.metadata().at("step"), "3");
  ASSERT_EQ(fp32.tensors().size(), manifest["tensors"].size());
  ASSERT_EQ(bf16.tensors().size(), manifest["tensors"].size());
  // The master weights, piece by piece, as the checkpoint's state file holds them.
  const SafetensorsFile master = SafetensorsFile::open(checkpoint / "master.rank00000.safetensors");
  std::int64_t parameters = 0;
  for (const json& tensor : manifest["tensors"]) {
    const auto name = tensor["name"].get<std::string>();
    SCOPED_TRACE(name);
    const auto shape = tensor["shape"].get<std::vector<std::int64_t>>();
    const TensorEntry* full = fp32.find(name);
    const TensorEntry* half = bf16.find(name);
    ASSERT_NE(full, nullptr);
    ASSERT_NE(half, nullptr);
    EXPECT_EQ(full->dtype, Dtype::f32);
    EXPECT_EQ(half->dtype, Dtype::bf16);
    EXPECT_EQ(full->shape, shape);
    EXPECT_EQ(half->shape, shape);
    parameters += full->numel();

    const std::vector<float> values = floats_of(fp32, *full);
    ASSERT_EQ(static_cast<std::int64_t>(values.size()), full->numel());
    std::span<const std::byte> half_bytes = bf16.data(*half);
    ASSERT_EQ(half_bytes.size(), values.size() * 2);
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::uint16_t bits = 0;
      std::memcpy(&bits, half_bytes.data() + 2 * i, 2);
      ASSERT_EQ(bits, cpu_adam::to_bf16(values[i]).bits) << "element " << i;
    }

    const TensorEntry* piece = master.find(name);
    ASSERT_NE(piece, nullptr);
    const std::int64_t offset = std::stoll(master.metadata().at("offset:" + name));
    const std::vector<float> saved = floats_of(master, *piece);
    const std::vector<float> exported(
        values.begin() + offset, values.begin() + offset + static_cast<std::int64_t>(saved.size()));
    EXPECT_EQ(exported, saved);
  }
  EXPECT_EQ(parameters, 7536);
}

TEST_F(TrainCheckpoint, ExportRefusesAnUnknownDtypeWithTheChoices) {
  saved_checkpoint(1);
  const fs::path out = dir_.path() / "model.safetensors";
  RunResult result =
      run_strata({"ckpt", "export", save_.string(), "--out", out.string(), "--dtype", "int8"});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("--dtype int8 is not one export writes"));
  EXPECT_THAT(result.err, HasSubstr("fix: pass --dtype fp32, bf16 or fp16"));
  EXPECT_FALSE(fs::exists(out));
}

// 6. A resume under another model or optimizer is refused before it trains.

TEST_F(TrainCheckpoint, ResumeUnderAnotherModelIsRefusedNamingTheManifest) {
  const fs::path checkpoint = saved_checkpoint(2);
  CheckpointConfig wider;
  wider.d_model = 32;
  write_config(wider);
  RunResult result = train(4, {"--resume", save_.string()});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr((checkpoint / "manifest.json").string()));
  EXPECT_THAT(result.err, HasSubstr("in the checkpoint but"));
  EXPECT_THAT(result.err,
              HasSubstr("fix: resume with the model config the checkpoint was saved with"));
  EXPECT_THAT(result.out, ::testing::Not(HasSubstr("step     3/4")));
}

TEST_F(TrainCheckpoint, ResumeUnderAnotherOptimizerIsRefusedNamingTheManifest) {
  const fs::path checkpoint = saved_checkpoint(2);
  CheckpointConfig lion;
  lion.optimizer = "Lion";
  write_config(lion);
  RunResult result = train(4, {"--resume", save_.string()});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr((checkpoint / "manifest.json").string()));
  EXPECT_THAT(result.err,
              HasSubstr("the checkpoint holds AdamW states, but the config's optimizer is Lion"));
  EXPECT_THAT(result.err, HasSubstr("fix: set optimizer.type to AdamW to resume this run"));
  EXPECT_THAT(result.out, ::testing::Not(HasSubstr("step     3/4")));
}

// 7. The NVMe swap directory: a killed job's files are reclaimed, a live job's are not touched.

class TrainCheckpointSwap : public TrainCheckpoint {
 protected:
  TrainCheckpointSwap() {
    fs::create_directory(swap_);
    CheckpointConfig config;
    config.nvme_path = swap_;
    config.steps_per_print = 100;
    write_config(config);
  }

  // Starts a long run and waits for its first step, when its swap files are in use.
  void start_long_run(SpawnedStrata& child) {
    ASSERT_TRUE(
        child.wait_for_output(fmt::format("step     1/{}", kLongRun), std::chrono::seconds(120)))
        << child.out() << child.err();
  }

  fs::path swap_ = dir_.path() / "swap";
  fs::path job_directory_ = swap_ / fmt::format("strata-{}", kJobName);
};

TEST_F(TrainCheckpointSwap, RunAfterASigkilledOneReclaimsItsSwapFiles) {
  {
    SpawnedStrata killed(train_arguments(kLongRun));
    start_long_run(killed);
    killed.signal(SIGKILL);
    RunResult result = killed.wait(std::chrono::seconds(120));
    ASSERT_EQ(result.exit_status, 128 + SIGKILL);
  }
  ASSERT_TRUE(fs::exists(job_directory_));
  ASSERT_FALSE(fs::is_empty(job_directory_));

  RunResult again = train(2);
  ASSERT_EQ(again.exit_status, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("trained 2 steps"));
  EXPECT_THAT(again.err,
              HasSubstr(fmt::format("left by a previous run of job {} that did not exit cleanly",
                                    kJobName)));
  EXPECT_TRUE(fs::is_empty(swap_));
}

TEST_F(TrainCheckpointSwap, SecondJobOnALiveJobsSwapPathIsRefusedNamingIt) {
  SpawnedStrata live(train_arguments(kLongRun));
  start_long_run(live);

  RunResult second = train(2);
  EXPECT_NE(second.exit_status, 0) << second.err;
  EXPECT_THAT(second.err, HasSubstr(job_directory_.string()));
  EXPECT_THAT(second.err, HasSubstr("is in use by a live job (pid "));
  EXPECT_THAT(second.err, HasSubstr(fmt::format("job {})", kJobName)));
  EXPECT_THAT(second.err,
              HasSubstr(fmt::format("fix: give this job another name, \"strata\": {{\"job_name\": "
                                    "\"{0}-2\"}} (it is \"{0}\")",
                                    kJobName)));
  EXPECT_THAT(second.err, HasSubstr("zero_optimization.offload_param/offload_optimizer.nvme_path "
                                    "at another directory than " +
                                    swap_.string()));
  EXPECT_THAT(second.out, ::testing::Not(HasSubstr("step     1/2")));

  // The refused job left the live one's files alone: it still trains, and stops cleanly.
  live.interrupt();
  RunResult first = live.wait(std::chrono::seconds(120));
  EXPECT_EQ(first.exit_status, 130) << first.err;
  EXPECT_THAT(first.out, HasSubstr("stopped by SIGINT after"));
  EXPECT_TRUE(fs::is_empty(swap_));
}

}  // namespace
}  // namespace strata::tools::testing
