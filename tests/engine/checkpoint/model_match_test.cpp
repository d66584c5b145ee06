// A checkpoint's token tables against the model's: a table padded past its vocabulary
// (engine/param_spec.h) matches only a table of the same shape and the same number of token rows;
// a table saved with its vocabulary's rows alone is refused with the way to carry its weights
// over; the manifest keeps the token rows through JSON and refuses rows past the table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/model_match.h"

namespace strata::engine::checkpoint {
namespace {

using ::testing::HasSubstr;

const std::filesystem::path kCheckpoint = "/checkpoints/run/global_step4";

// A manifest of the built-in GPT with wte [rows, 16] of which `tokens` are tokens (0: unpadded).
Manifest gpt_manifest(std::int64_t rows, std::int64_t tokens) {
  Manifest manifest;
  manifest.config = {{"strata", {{"model", {{"n_layer", 1}, {"vocab", tokens ? tokens : rows}}}}}};
  manifest.tensors = {{"wte", {rows, 16}, tokens}, {"wpe", {8, 16}}};
  return manifest;
}

// What check_model says, cause and fix, or "accepted".
std::string verdict(const Manifest& manifest, const std::vector<ManifestTensor>& model) {
  try {
    check_model(manifest, kCheckpoint, model);
  } catch (const UserError& error) {
    return std::string(error.what()) + "\nfix: " + error.fix();
  }
  return "accepted";
}

const std::vector<ManifestTensor> kModel = {{"wte", {128, 16}, 80}, {"wpe", {8, 16}}};

TEST(ModelMatch, APaddedTableMatchesTheSameVocabulary) {
  EXPECT_EQ(verdict(gpt_manifest(128, 80), kModel), "accepted");
}

TEST(ModelMatch, AnotherVocabularyInTheSamePaddedRowsIsRefused) {
  const std::string refusal = verdict(gpt_manifest(128, 100), kModel);
  EXPECT_THAT(refusal, HasSubstr("/checkpoints/run/global_step4/manifest.json: tensor \"wte\" "
                                 "holds 100 tokens' rows in the checkpoint but 80 in this model "
                                 "(both padded to [128, 16])"));
  EXPECT_THAT(refusal,
              HasSubstr("fix: resume with the model config the checkpoint was saved with"));
  // A table of 128 tokens has no padding, and is another vocabulary still.
  EXPECT_THAT(verdict(gpt_manifest(128, 0), kModel),
              HasSubstr("holds 128 tokens' rows in the checkpoint but 80"));
}

TEST(ModelMatch, ATableOfTheVocabularysRowsAloneIsRefusedWithTheWayToCarryItsWeightsOver) {
  const std::string refusal = verdict(gpt_manifest(80, 0), kModel);
  EXPECT_THAT(refusal, HasSubstr("tensor \"wte\" is [80, 16] in the checkpoint, a row per token, "
                                 "but [128, 16] in this model, which pads its token tables to a "
                                 "multiple of 128 rows"));
  EXPECT_THAT(refusal, HasSubstr("fix: export its weights with `strata ckpt export "
                                 "/checkpoints/run/global_step4 --hf DIR` and start a new run "
                                 "from them with \"strata\": {\"model\": {\"from_pretrained\": "
                                 "\"DIR\"}}"));
  // Another shape altogether is another model.
  EXPECT_THAT(
      verdict(gpt_manifest(96, 0), kModel),
      HasSubstr("tensor \"wte\" is [96, 16] in the checkpoint but [128, 16] in this model"));
}

TEST(ModelMatch, TheManifestKeepsATablesTokenRows) {
  const Manifest manifest = gpt_manifest(128, 80);
  const nlohmann::json json = to_json(manifest);
  EXPECT_EQ(json["tensors"][0]["unpadded_rows"], 80);
  EXPECT_FALSE(json["tensors"][1].contains("unpadded_rows"));
  const Manifest read = manifest_from_json(json, kCheckpoint / kManifestName);
  EXPECT_EQ(read.tensors[0].unpadded_rows, 80);
  EXPECT_EQ(read.tensors[0].unpadded_shape(), (std::vector<std::int64_t>{80, 16}));
  EXPECT_EQ(read.tensors[1].unpadded_rows, 0);
  EXPECT_EQ(read.tensors[1].unpadded_shape(), (std::vector<std::int64_t>{8, 16}));
}

TEST(ModelMatch, TokenRowsPastTheTableAreADamagedManifest) {
  nlohmann::json json = to_json(gpt_manifest(128, 80));
  json["tensors"][0]["unpadded_rows"] = 129;
  try {
    manifest_from_json(json, kCheckpoint / kManifestName);
    FAIL() << "accepted";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(),
                HasSubstr("unpadded_rows 129 is not within tensor \"wte\"'s 128 rows"));
    EXPECT_THAT(error.fix(), HasSubstr("resume from another checkpoint"));
  }
}

}  // namespace
}  // namespace strata::engine::checkpoint
