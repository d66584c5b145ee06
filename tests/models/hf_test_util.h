#pragma once

// Hand-made Hugging Face folders for the loading tests: safetensors files written by the format's
// letter, a temporary folder, and the engine's masters after starting from one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "cpu_adam/half.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/model_plan.h"
#include "tests/engine/test_world.h"
#include "tests/models/host_engine.h"

namespace strata::models::testing {

struct Tensor {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// Writes a safetensors file by the format's letter: 8-byte header length, JSON, data.
inline void write_safetensors(const std::filesystem::path& path,
                              const std::map<std::string, Tensor>& state,
                              const std::string& dtype) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, tensor] : state) {
    const std::size_t begin = data.size();
    for (float value : tensor.values) {
      if (dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&value), 4);
      } else {
        const std::uint16_t bits =
            dtype == "BF16" ? cpu_adam::to_bf16(value).bits : cpu_adam::to_fp16(value).bits;
        data.append(reinterpret_cast<const char*>(&bits), 2);
      }
    }
    header[name] = {
        {"dtype", dtype}, {"shape", tensor.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t length = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text << data;
}

struct Folder {
  std::filesystem::path path;
  explicit Folder(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             fmt::format("strata-hf-{}-{}", name,
                         ::testing::UnitTest::GetInstance()->random_seed())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~Folder() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
  }
};

// The engine's fp32 masters after starting from `folder`, at stage 3 over a device budget
// that keeps the modules on the host.
inline std::vector<float> loaded_masters(const std::filesystem::path& folder, int seq_len = 4) {
  const engine::Config config = engine::parse_config_text(fmt::format(R"({{
    "train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {{"stage": 3, "offload_optimizer": {{"device": "cpu"}}}},
    "strata": {{"model": {{"from_pretrained": "{}", "seq_len": {}}}}}}})",
                                                                      folder.string(), seq_len),
                                                          "test config")
                                    .config;
  return HostEngine(config, 1).engine.master_parameters();
}

// The refusal loading `folder` gives, cause and fix, or "no refusal".
inline std::string refusal(const std::filesystem::path& folder) {
  try {
    loaded_masters(folder);
  } catch (const UserError& error) {
    return std::string(error.what()) + "\nfix: " + error.fix();
  }
  return "no refusal";
}

}  // namespace strata::models::testing
