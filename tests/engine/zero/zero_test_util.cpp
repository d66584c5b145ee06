#include "tests/engine/zero/zero_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <span>
#include <sstream>

#include "base/error.h"
#include "engine/config/config.h"
#include "engine/memory/nvme_store.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/data/token_dataset.h"
#include "models/gpt/gpt.h"

namespace strata::engine::zero_testing {
namespace {

class LocalComm final : public gpu::Comm {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string_view backend() const override { return "solo"; }

  void all_gather(gpu::Stream& stream, const void* send, void* receive, std::int64_t count_per_rank,
                  gpu::DataType type) override {
    begin_collective(gpu::CollectiveKind::all_gather, send, receive, count_per_rank, type);
    copy(stream, receive, send, count_per_rank * gpu::size_bytes(type));
  }

  void reduce_scatter(gpu::Stream& stream, const void* send, void* receive,
                      std::int64_t count_per_rank, gpu::DataType type,
                      gpu::ReduceOp /*op*/) override {
    begin_collective(gpu::CollectiveKind::reduce_scatter, send, receive, count_per_rank, type);
    copy(stream, receive, send, count_per_rank * gpu::size_bytes(type));
  }

  void all_reduce(gpu::Stream& /*stream*/, void* data, std::int64_t count_elements,
                  gpu::DataType type, gpu::ReduceOp /*op*/) override {
    begin_collective(gpu::CollectiveKind::all_reduce, data, data, count_elements, type);
  }

  void broadcast(gpu::Stream& /*stream*/, void* data, std::int64_t count_elements,
                 gpu::DataType type, int root) override {
    begin_collective(gpu::CollectiveKind::broadcast, data, data, count_elements, type, root);
  }

  void barrier() override {}

 private:
  static void copy(gpu::Stream& stream, void* target, const void* source, std::int64_t bytes) {
    if (bytes == 0 || target == source) return;
    stream.copy(target, source, bytes, gpu::CopyKind::device_to_device);
  }
};

// "the quick brown fox..." repeated: structure a tiny model learns within a few steps, so that
// the losses of the compared runs move and a wrong gradient shows.
const std::vector<std::uint16_t>& corpus() {
  static const std::vector<std::uint16_t> tokens = [] {
    std::string text;
    while (text.size() < 4096)
      text += "the quick brown fox jumps over the lazy dog. ";
    return std::vector<std::uint16_t>(text.begin(), text.end());
  }();
  return tokens;
}

// This rank's micro-batches of step `step`, back to back, as train_batch takes them.
void fill_batch(int step, std::int64_t micro_batch, std::int64_t accumulation, int rank,
                int world_size, std::int64_t seq_len, std::span<std::int32_t> inputs,
                std::span<std::int32_t> targets) {
  const auto length = static_cast<std::size_t>(micro_batch * seq_len);
  for (std::int64_t micro = 0; micro < accumulation; ++micro) {
    const auto at = static_cast<std::size_t>(micro) * length;
    models::sample_sequences(corpus(), 3, step,
                             models::first_sequence(micro, rank, world_size, micro_batch),
                             static_cast<int>(micro_batch), static_cast<int>(seq_len),
                             inputs.subspan(at, length), targets.subspan(at, length));
  }
}

gpu::CommCounters difference(const gpu::CommCounters& after, const gpu::CommCounters& before) {
  gpu::CommCounters result;
  for (std::size_t k = 0; k < result.by_kind.size(); ++k) {
    result.by_kind[k].calls = after.by_kind[k].calls - before.by_kind[k].calls;
    result.by_kind[k].bytes_sent = after.by_kind[k].bytes_sent - before.by_kind[k].bytes_sent;
    result.by_kind[k].bytes_received =
        after.by_kind[k].bytes_received - before.by_kind[k].bytes_received;
  }
  return result;
}

void record_layout(Engine& engine, models::Gpt& model, TrainedRun& run) {
  const zero::FlatLayout& layout = engine.layout();
  run.parameter_count = layout.parameter_count();
  run.padded_numel.clear();
  run.borrowers.assign(static_cast<std::size_t>(layout.module_count()), 0);
  for (int m = 0; m < layout.module_count(); ++m)
    run.padded_numel.push_back(layout.module(m).padded_numel);
  for (engine::Module* module : model.modules()) {
    for (int lender : module->borrowed_modules())
      ++run.borrowers.at(static_cast<std::size_t>(lender));
  }
}

std::string scientific(double value) {
  std::ostringstream text;
  text << std::scientific << std::setprecision(2) << value;
  return text.str();
}

}  // namespace

std::unique_ptr<gpu::Comm> create_local_comm() {
  return std::make_unique<LocalComm>();
}

nlohmann::json base_config(std::int64_t micro_batch, std::int64_t accumulation,
                           const TinyModel& model) {
  return {
      {"train_micro_batch_size_per_gpu", micro_batch},
      {"gradient_accumulation_steps", accumulation},
      {"gradient_clipping", 1.0},
      {"bf16", {{"enabled", true}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}, {"weight_decay", 0.01}}}}},
      {"zero_optimization", {{"stage", 0}}},
      {"strata",
       {{"model",
         {{"n_layer", model.n_layer},
          {"n_head", model.n_head},
          {"d_model", model.d_model},
          {"seq_len", model.seq_len},
          {"vocab", model.vocab}}},
        {"seed", 7}}},
  };
}

std::int64_t parameter_count(const TinyModel& shape) {
  models::Gpt model({shape.n_layer, shape.n_head, shape.d_model, shape.seq_len, shape.vocab, 1});
  std::int64_t count = 0;
  for (engine::Module* module : model.modules()) {
    for (const ParamSpec& spec : module->parameters())
      count += spec.numel();
  }
  return count;
}

TrainedRun train(const nlohmann::json& config_json, Ranks ranks, int steps, int eval_every,
                 const CheckpointPlan& checkpoints) {
  const int world_size = ranks == Ranks::local ? 1 : test_world().world_size();
  const Config config = parse_config(config_json, world_size).config;
  gpu::DeviceOptions options;
  options.memory_budget_bytes = config.strata.device_memory_budget > 0
                                    ? config.strata.device_memory_budget
                                    : std::int64_t{256} << 20;
  auto device = gpu::create_host_device(options);
  auto ops = gpu::create_ops(*device);
  std::unique_ptr<gpu::Comm> comm =
      ranks == Ranks::local ? create_local_comm() : gpu::create_comm(test_world(), *device);
  const ModelConfig& m = config.strata.model;
  const std::int64_t micro_batch = config.batch.train_micro_batch_size_per_gpu;
  const std::int64_t accumulation = config.batch.gradient_accumulation_steps;
  TrainedRun run;
  run.world_size = comm->world_size();
  try {
    models::Gpt model({m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab, micro_batch});
    Runtime runtime{*device, *ops, *comm, checkpoints.faults};
    Engine engine(runtime, config, model);
    record_layout(engine, model, run);
    std::vector<std::int32_t> inputs(
        static_cast<std::size_t>(model.tokens_per_micro_batch() * accumulation));
    std::vector<std::int32_t> targets(inputs.size());
    int first = 1;
    if (!checkpoints.resume_from.empty()) {
      engine.load_checkpoint(checkpoints.resume_from, checkpoints.resume_tag);
      first = static_cast<int>(engine.batches_trained()) + 1;
    }
    const auto saves_after = [&](int step) {
      return step == checkpoints.save_at ||
             (checkpoints.save_every > 0 && step % checkpoints.save_every == 0);
    };
    const auto tag = [](int step) { return "global_step" + std::to_string(step); };
    for (int step = first; step <= steps; ++step) {
      fill_batch(step, micro_batch, accumulation, comm->rank(), comm->world_size(), m.seq_len,
                 inputs, targets);
      const int planned = step + checkpoints.plan_ahead - 1;
      if (checkpoints.plan_ahead > 0 && saves_after(planned))
        engine.plan_checkpoint(checkpoints.save_dir, tag(planned));
      if (eval_every > 0 && (step - 1) % eval_every == 0)
        run.eval_losses.push_back(engine.evaluate(inputs, targets));
      std::int64_t completions = 0;
      for (const memory::NvmeStore* store : engine.swap_stores())
        completions += store->completions();
      run.swap_completions.push_back(completions);
      const gpu::CommCounters before = comm->counters();
      const std::int64_t functions_before = device->compute_stream().host_functions();
      StepStats stats = engine.train_batch(inputs, targets);
      run.traffic.push_back(difference(comm->counters(), before));
      run.compute_host_functions.push_back(device->compute_stream().host_functions() -
                                           functions_before);
      run.losses.push_back(stats.loss);
      run.steps.push_back(stats);
      if (saves_after(step)) {
        const CheckpointInfo info = engine.save_checkpoint(checkpoints.save_dir, tag(step));
        run.saves_during_step += info.during_step ? 1 : 0;
      }
    }
    run.params = engine.master_parameters();
  } catch (const UserError& error) {
    if (!checkpoints.stop_on_error) throw;
    run.error = error.what();
    if (run.error.empty()) run.error = "(a UserError without a message)";
    run.error_fix = error.fix();
  }
  run.device_bytes_left = device->bytes_in_use();
  run.pinned_bytes_left = device->pinned_bytes_in_use();
  return run;
}

const TrainedRun& reference(const nlohmann::json& config, int steps) {
  static std::map<std::pair<std::string, int>, TrainedRun> cache;
  auto key = std::make_pair(config.dump(), steps);
  auto found = cache.find(key);
  if (found == cache.end())
    found = cache.emplace(std::move(key), train(config, Ranks::local, steps)).first;
  return found->second;
}

void expect_losses_near(const TrainedRun& run, const TrainedRun& reference, double relative) {
  ASSERT_EQ(run.steps.size(), reference.steps.size());
  double worst = 0;
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    const StepStats& got = run.steps[i];
    const StepStats& expected = reference.steps[i];
    worst = std::max(worst, std::abs(got.loss - expected.loss) / std::abs(expected.loss));
    EXPECT_NEAR(got.loss, expected.loss, relative * std::abs(expected.loss))
        << "loss of step " << i + 1 << " (relative error "
        << std::abs(got.loss - expected.loss) / std::abs(expected.loss) << ")";
    EXPECT_NEAR(got.grad_norm, expected.grad_norm, 10 * relative * std::abs(expected.grad_norm))
        << "grad_norm of step " << i + 1 << " (relative error "
        << std::abs(got.grad_norm - expected.grad_norm) / std::abs(expected.grad_norm) << ")";
  }
  // The worst error, as a test property (--gtest_output=xml:FILE keeps it).
  ::testing::Test::RecordProperty("worst_loss_relative_error", scientific(worst));
}

void expect_params_near(const TrainedRun& run, const TrainedRun& reference, double relative) {
  ASSERT_EQ(run.params.size(), reference.params.size());
  double largest = 0;
  for (float value : reference.params)
    largest = std::max(largest, std::abs(static_cast<double>(value)));
  const double allowed = relative * largest;
  std::size_t failures = 0;
  double worst = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < run.params.size(); ++i) {
    const double error =
        std::abs(static_cast<double>(run.params[i]) - static_cast<double>(reference.params[i]));
    if (!(error <= worst)) {
      worst = error;
      worst_at = i;
    }
    if (!(error <= allowed) && ++failures <= 5) {
      ADD_FAILURE() << "parameter " << i << ": " << run.params[i] << " vs reference "
                    << reference.params[i] << " (error " << error << ", allowed " << allowed
                    << " = " << relative << " x max |reference| " << largest << ")";
    }
  }
  ::testing::Test::RecordProperty("worst_param_error_of_max_abs", scientific(worst / largest));
  EXPECT_EQ(failures, 0u) << "parameters out of tolerance; the worst is parameter " << worst_at
                          << ", off by " << worst;
}

TempDirectory::TempDirectory(bool shared) : shared_(shared) {
  static std::atomic<int> counter{0};
  std::string owner = std::to_string(::getpid());
  if (shared && test_world().uses_mpi()) {
    // Every rank of one mpirun job sees the same job id (Open MPI) or, failing that, the same
    // parent process (mpirun itself, on one machine).
    const char* job = std::getenv("OMPI_MCA_ess_base_jobid");
    owner = "job" + (job != nullptr ? std::string(job) : std::to_string(::getppid()));
  }
  path_ = std::filesystem::temp_directory_path() /
          ("strata-zero-test-" + owner + "-" + std::to_string(counter++));
  if (shared_) test_world().barrier();  // no rank creates it before another has looked
  std::filesystem::create_directories(path_);
  if (shared_) test_world().barrier();
}

TempDirectory::~TempDirectory() {
  if (shared_) test_world().barrier();
  if (!shared_ || test_world().rank() == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
}

std::vector<std::filesystem::path> files_under(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  return files;
}

nlohmann::json with_zero(nlohmann::json config, nlohmann::json zero,
                         const std::string& param_device, const std::string& optimizer_device,
                         const std::string& nvme_path) {
  if (param_device != "none")
    zero["offload_param"] = offload_section(param_device, nvme_path, true);
  if (optimizer_device != "none")
    zero["offload_optimizer"] = offload_section(optimizer_device, nvme_path, false);
  config["zero_optimization"] = std::move(zero);
  config["strata"]["job_name"] = job_name_for_test();
  return config;
}

nlohmann::json offload_section(const std::string& device, const std::string& nvme_path,
                               bool is_param) {
  nlohmann::json section = {{"device", device}, {"pin_memory", false}};
  if (device == "nvme") section["nvme_path"] = nvme_path;
  if (is_param) {
    // Room for the largest module of the tiny GPT (a block: about 12.7k elements, padded to at
    // most 16384 at 4 ranks); max_in_cpu 0 keeps no parameter in CPU RAM, so every gather reads
    // NVMe.
    section["buffer_count"] = 4;
    section["buffer_size"] = 1 << 16;
    if (device == "nvme") section["max_in_cpu"] = 0;
  } else {
    section["buffer_count"] = 4;
    section["pipeline_read"] = true;
    section["pipeline_write"] = true;
  }
  return section;
}

std::string job_name_for_test() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info != nullptr ? std::string(info->name()) : "zero";
  std::replace_if(
      name.begin(), name.end(), [](char c) { return c == '/'; }, '-');
  return name;
}

}  // namespace strata::engine::zero_testing
