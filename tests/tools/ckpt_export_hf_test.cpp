// `strata ckpt export --hf`, run as a user runs it: the folder loads back with from_pretrained as
// the same model; a folder that held an earlier export keeps only the new weights, so that
// transformers and strata both load them; the tokenizer files of the folder the model came from
// are copied beside them; every file is readable by others (0644 under a umask of 022).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// `count` uint16 tokens of a repeating pattern below 64, as a raw array (nanoGPT's layout).
fs::path token_file(const TempDir& dir, std::size_t count) {
  std::vector<std::uint16_t> tokens(count);
  for (std::size_t i = 0; i < count; ++i)
    tokens[i] = static_cast<std::uint16_t>((i * 7 + i / 5) % 64);
  return dir.write("train.bin",
                   std::string(reinterpret_cast<const char*>(tokens.data()), count * 2));
}

std::string data_json(const fs::path& data) {
  return fmt::format(R"({{"path": "{}", "dtype": "uint16"}})", data.string());
}

// L1 H1 C16 T8 over a 64-token vocabulary, micro-batch `batch`.
std::string gpt_config(int batch, const fs::path& data) {
  return fmt::format(R"({{
  "train_micro_batch_size_per_gpu": {},
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2}}}},
  "zero_optimization": {{"stage": 0}},
  "strata": {{
    "model": {{"n_layer": 1, "n_head": 1, "d_model": 16, "seq_len": 8, "vocab": 64}},
    "train_steps": 1, "seed": 7, "data": {}
  }}
}})",
                     batch, data_json(data));
}

std::set<std::string> files_in(const fs::path& folder) {
  std::set<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder))
    names.insert(entry.path().filename().string());
  return names;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The shapes a safetensors file's header gives its tensors, by name (the format: an 8-byte
// little-endian header length, then the JSON header).
std::map<std::string, std::vector<std::int64_t>> tensor_shapes(const fs::path& file) {
  const std::string bytes = read_text(file);
  std::uint64_t length = 0;
  std::memcpy(&length, bytes.data(), sizeof(length));
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, length));
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& [name, entry] : header.items())
    if (name != "__metadata__") shapes[name] = entry.at("shape").get<std::vector<std::int64_t>>();
  return shapes;
}

// The weights file transformers' from_pretrained reads in a local folder: model.safetensors
// whenever it is there, else the index (modeling_utils.py, PreTrainedModel.from_pretrained).
std::string transformers_reads(const fs::path& folder) {
  if (fs::is_regular_file(folder / "model.safetensors")) return "model.safetensors";
  if (fs::is_regular_file(folder / "model.safetensors.index.json"))
    return "model.safetensors.index.json";
  return "";
}

// The index's shard files, the index itself and config.json: what a sharded export leaves.
std::set<std::string> sharded_folder(const fs::path& folder) {
  const nlohmann::json index =
      nlohmann::json::parse(std::ifstream(folder / "model.safetensors.index.json"));
  std::set<std::string> names = {"config.json", "model.safetensors.index.json"};
  for (const auto& [tensor, shard] : index.at("weight_map").items())
    names.insert(shard.get<std::string>());
  return names;
}

std::string mode_of(const fs::path& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return "missing";
  return fmt::format("{:04o}", info.st_mode & 07777);
}

// The loss `eval --json` prints for `arguments`.
double eval_loss(const std::vector<std::string>& arguments) {
  std::vector<std::string> command = {"eval", "--json"};
  command.insert(command.end(), arguments.begin(), arguments.end());
  const RunResult result = run_strata(command);
  EXPECT_EQ(result.exit_status, 0) << result.err;
  if (result.exit_status != 0) return -1;
  return nlohmann::json::parse(result.out).at("loss").get<double>();
}

// Each test runs its commands under a umask of 022, as a login shell has it, so that the modes
// it reads are the ones a user gets.
class CkptExportHf : public ::testing::Test {
 protected:
  CkptExportHf() : saved_umask_(::umask(022)) {}
  ~CkptExportHf() override { ::umask(saved_umask_); }

  // Trains the small GPT 10 steps, saving global_step5 and global_step10.
  void train_gpt() {
    data_ = token_file(dir_, 2001);
    config_ = dir_.write("config.json", gpt_config(2, data_));
    const RunResult trained =
        run_strata({"train", "--config", config_.string(), "--steps", "10", "--save-every", "5",
                    "--save-dir", ckpt_.string(), "--out", (dir_.path() / "out").string()});
    ASSERT_EQ(trained.exit_status, 0) << trained.err;
  }

  // Exports DIR/TAG (the save directory's latest for an empty tag) into hf_.
  RunResult export_hf(const std::string& tag, const std::vector<std::string>& extra = {}) const {
    const fs::path source = tag.empty() ? ckpt_ : ckpt_ / tag;
    std::vector<std::string> command = {"ckpt", "export", source.string(), "--hf", hf_.string()};
    command.insert(command.end(), extra.begin(), extra.end());
    RunResult result = run_strata(command);
    EXPECT_EQ(result.exit_status, 0) << result.err;
    return result;
  }

  // The loss of the exported folder loaded with from_pretrained, on the run's validation split.
  double loss_of_folder() const {
    const fs::path from_hf =
        dir_.write("from_hf.json", fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "strata": {{"model": {{"from_pretrained": "{}"}}, "data": {}}}
}})",
                                               hf_.string(), data_json(data_)));
    return eval_loss({"--config", from_hf.string()});
  }

  double loss_of_checkpoint(const std::string& tag) const {
    return eval_loss({"--config", config_.string(), "--checkpoint", (ckpt_ / tag).string()});
  }

  TempDir dir_;
  fs::path ckpt_ = dir_.path() / "ckpt";
  fs::path hf_ = dir_.path() / "hf";
  fs::path data_;
  fs::path config_;

 private:
  mode_t saved_umask_;
};

// A checkpoint exported as a Hugging Face folder (sharded by a small --max-shard-size) and
// loaded back with from_pretrained is the same model: the same loss on the same windows, to the
// bit in fp32. The built-in shape keys become GPT2Config's; every file is mode 0644.
TEST_F(CkptExportHf, AnExportedFolderLoadsBackAsTheSameModel) {
  train_gpt();
  const RunResult exported = export_hf("global_step10", {"--max-shard-size", "4K"});
  EXPECT_TRUE(fs::exists(hf_ / "model-00007-of-00007.safetensors")) << exported.out;
  EXPECT_EQ(files_in(hf_), sharded_folder(hf_));
  for (const std::string& name : files_in(hf_))
    EXPECT_EQ(mode_of(hf_ / name), "0644") << name;
  const nlohmann::json hf_config = nlohmann::json::parse(std::ifstream(hf_ / "config.json"));
  EXPECT_EQ(hf_config["model_type"], "gpt2");
  EXPECT_EQ(hf_config["n_embd"], 16);
  EXPECT_EQ(hf_config["n_positions"], 8);
  EXPECT_EQ(loss_of_folder(), loss_of_checkpoint("global_step10"));
}

// A single-file export over a sharded one: the old shards and index go (save_pretrained removes
// the shards it does not write again), so that strata, which reads an index first, does not load
// the older weights, and no stray shard is left.
TEST_F(CkptExportHf, ASingleFileOverAShardedExportLeavesOnlyTheNewWeights) {
  train_gpt();
  export_hf("global_step5", {"--max-shard-size", "4K"});
  ASSERT_TRUE(fs::exists(hf_ / "model.safetensors.index.json"));
  const RunResult exported = export_hf("global_step10");
  EXPECT_THAT(exported.out, HasSubstr("removed 8 weight file(s) of an earlier export"));
  EXPECT_EQ(files_in(hf_), (std::set<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(transformers_reads(hf_), "model.safetensors");
  // wte as GPT-2 holds it: the vocabulary's 64 rows, not the 128 strata pads it to.
  EXPECT_EQ(tensor_shapes(hf_ / "model.safetensors").at("transformer.wte.weight"),
            (std::vector<std::int64_t>{64, 16}));
  EXPECT_EQ(loss_of_folder(), loss_of_checkpoint("global_step10"));
}

// A sharded export over a single-file one, then over shards of another count: the earlier
// model.safetensors goes (transformers would load it before the index), and so do the shards of
// the other count.
TEST_F(CkptExportHf, AShardedOverASingleFileOrOtherShardsLeavesOnlyTheNewWeights) {
  train_gpt();
  export_hf("global_step5");
  ASSERT_TRUE(fs::exists(hf_ / "model.safetensors"));
  const RunResult seven = export_hf("global_step10", {"--max-shard-size", "4K"});
  EXPECT_THAT(seven.out, HasSubstr("removed 1 weight file(s) of an earlier export"));
  EXPECT_EQ(files_in(hf_), sharded_folder(hf_));
  EXPECT_EQ(transformers_reads(hf_), "model.safetensors.index.json");

  export_hf("global_step10", {"--max-shard-size", "12K"});
  const std::set<std::string> left = files_in(hf_);
  EXPECT_EQ(left, sharded_folder(hf_));
  EXPECT_FALSE(left.contains("model-00007-of-00007.safetensors"));
  EXPECT_LT(left.size(), 9u);
  EXPECT_EQ(loss_of_folder(), loss_of_checkpoint("global_step10"));
}

// A Llama-family model built from a config.json with fresh weights trains, exports as an HF
// folder (its config.json kept from the checkpoint's manifest) and loads back as the same model.
// The tokenizer files beside that config.json are copied into the export as they are; once the
// folder is gone, the export says that it copied none.
TEST_F(CkptExportHf, ALlamaExportsWithItsTokenizerFilesAndLoadsBack) {
  data_ = token_file(dir_, 2001);
  const fs::path llama = dir_.path() / "llama";
  fs::create_directories(llama);
  const fs::path hf_config = dir_.write("llama/config.json", R"({
    "model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "hidden_size": 16, "intermediate_size": 32, "vocab_size": 64,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": false})");
  const std::vector<std::string> tokenizer_files = {"generation_config.json", "tokenizer.json",
                                                    "tokenizer_config.json"};
  for (const std::string& name : tokenizer_files)
    dir_.write("llama/" + name, fmt::format(R"({{"file": "{}"}})", name));
  dir_.write("llama/README.md", "not the tokenizer's\n");
  config_ = dir_.write("config.json", fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2}}}},
  "strata": {{"model": {{"config": "{}", "seq_len": 8}}, "data": {}, "seed": 3}}
}})",
                                                  hf_config.string(), data_json(data_)));
  const RunResult trained =
      run_strata({"train", "--config", config_.string(), "--steps", "20", "--save-dir",
                  ckpt_.string(), "--out", (dir_.path() / "out").string()});
  ASSERT_EQ(trained.exit_status, 0) << trained.err;
  EXPECT_THAT(trained.out, HasSubstr("llama, "));
  EXPECT_THAT(trained.out, HasSubstr("vocab 64 (padded to 128), untied head"));

  const RunResult exported = export_hf("");
  EXPECT_THAT(exported.out,
              HasSubstr(fmt::format("copied from {}: tokenizer.json, tokenizer_config.json, "
                                    "generation_config.json",
                                    llama.string())));
  EXPECT_EQ(files_in(hf_),
            (std::set<std::string>{"config.json", "model.safetensors", "generation_config.json",
                                   "tokenizer.json", "tokenizer_config.json"}));
  for (const std::string& name : tokenizer_files)
    EXPECT_EQ(read_text(hf_ / name), read_text(llama / name)) << name;
  for (const std::string& name : files_in(hf_))
    EXPECT_EQ(mode_of(hf_ / name), "0644") << name;
  const nlohmann::json written = nlohmann::json::parse(std::ifstream(hf_ / "config.json"));
  EXPECT_EQ(written["model_type"], "llama");
  EXPECT_EQ(written["num_key_value_heads"], 2);
  // Both tables as LlamaForCausalLM holds them: vocab_size rows, not the 128 strata pads them to.
  const auto shapes = tensor_shapes(hf_ / "model.safetensors");
  EXPECT_EQ(shapes.at("model.embed_tokens.weight"), (std::vector<std::int64_t>{64, 16}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (std::vector<std::int64_t>{64, 16}));

  const fs::path from_hf = dir_.write("from_hf.json", fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "strata": {{"model": {{"from_pretrained": "{}", "seq_len": 8}}, "data": {}}}
}})",
                                                                  hf_.string(), data_json(data_)));
  const double fresh = eval_loss({"--config", config_.string()});
  const double trained_loss =
      eval_loss({"--config", config_.string(), "--checkpoint", ckpt_.string()});
  EXPECT_EQ(eval_loss({"--config", from_hf.string()}), trained_loss);
  EXPECT_LT(trained_loss, fresh - 0.5);

  fs::remove_all(llama);
  hf_ = dir_.path() / "hf-again";
  const RunResult without = export_hf("");
  EXPECT_THAT(without.out, HasSubstr(fmt::format("no tokenizer files copied: {}, the folder the "
                                                 "model came from, is no longer there",
                                                 llama.string())));
  EXPECT_EQ(files_in(hf_), (std::set<std::string>{"config.json", "model.safetensors"}));
}

}  // namespace
}  // namespace strata::tools::testing
