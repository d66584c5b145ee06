// `strata bench attention`: the fused causal attention (gpu::Ops::attention_forward and
// attention_backward, FlashAttention-2's algorithm) through the device's own ops, in the compute
// type asked for, on the shapes asked for: the forward alone, and the forward followed by the
// backward, as a training step runs them. On CUDA its peer is
// torch.nn.functional.scaled_dot_product_attention with each of PyTorch's backends on the same
// shapes, run by scripts/torch_sdpa_peer.py from this command's --json; this command states the
// target it is held to.
//
//   strata bench attention [--device host|cuda] [--dtype bfloat16] [--shape BxHxTxD ...]
//                          [--kv-heads N] [--kernels auto|strata] [--repeats 20] [--json]
//
// On CUDA, --kernels auto (the default, as training runs) takes cuDNN's fused attention where it
// builds a plan and strata's kernels elsewhere; --kernels strata measures strata's own. Each
// shape's row says which kernels ran its forward.

#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/bench.h"
#include "bench/bench_device.h"
#include "bench/bench_op_timer.h"
#include "gpu/ops.h"

namespace strata::tools {
namespace {

struct AttentionOptions {
  std::string device = "host";
  std::string dtype = "bfloat16";
  // The shapes FlashAttention-2's paper and PyTorch's SDPA benchmarks report at head_dim 128.
  std::vector<std::string> shapes = {"8x16x1024x128", "4x16x2048x128"};
  int kv_heads = 0;  // 0 = each shape's head count (plain multi-head attention)
  std::string kernels = "auto";
  int repeats = 20;
  bool json = false;
};

// What the GPU's attention is held to: 0.9x the fastest of PyTorch's SDPA backends on each shape
// and direction.
constexpr double kTargetVsSdpa = 0.9;

// The widest head the CUDA kernels take (attention_head_dim_max in gpu/cuda/kernels/attention.h:
// a row of a head lives in one warp's registers); the host is held to it too, so that a shape
// measured on one device runs on the other.
constexpr std::int64_t kHeadDimMax = 256;

struct AttentionShape {
  std::string text;  // "8x16x1024x128"
  std::int64_t batch = 0, heads = 0, seq_len = 0, head_dim = 0, kv_heads = 0;

  // Causal attention's flops as FlashAttention's benchmarks count them: two products of
  // T x T x D per head (q k^T and p v), 2 flops a multiply-add, half the scores masked:
  // 4 * B * H * T * T * D / 2. The backward is 2.5x that (five products, FA2's convention), so
  // forward plus backward is 3.5x the forward.
  double forward_flops() const {
    return 4.0 * static_cast<double>(batch * heads) * static_cast<double>(seq_len) *
           static_cast<double>(seq_len) * static_cast<double>(head_dim) / 2.0;
  }
  double forward_backward_flops() const { return 3.5 * forward_flops(); }
};

AttentionShape parse_shape(const std::string& text, int kv_heads) {
  const std::string fix =
      "give --shape as four positive whole numbers joined by x: batch, heads, sequence length "
      "and head dim, as 8x16x1024x128";
  std::int64_t parts[4] = {};
  const char* cursor = text.data();
  const char* const end = text.data() + text.size();
  for (int i = 0; i < 4; ++i) {
    const auto [next, error] = std::from_chars(cursor, end, parts[i]);
    const bool last = i == 3;
    const bool separated = last ? next == end : next != end && *next == 'x';
    if (error != std::errc() || parts[i] <= 0 || !separated)
      throw UserError("--shape " + text + " is not BxHxTxD", fix, 2);
    if (!last) cursor = next + 1;
  }
  AttentionShape shape{text, parts[0], parts[1], parts[2], parts[3], kv_heads};
  if (shape.kv_heads == 0) shape.kv_heads = shape.heads;
  if (shape.heads % shape.kv_heads != 0) {
    throw UserError(fmt::format("--kv-heads {} does not divide the {} query heads of --shape {}",
                                shape.kv_heads, shape.heads, text),
                    "give --kv-heads a divisor of every shape's head count (each kv head serves "
                    "a whole group of query heads), or leave it out for one kv head per query "
                    "head",
                    2);
  }
  if (shape.head_dim > kHeadDimMax) {
    throw UserError(fmt::format("--shape {}: head dim {} is wider than the {} the attention ops "
                                "take",
                                text, shape.head_dim, kHeadDimMax),
                    fmt::format("give a head dim of {} or less", kHeadDimMax), 2);
  }
  return shape;
}

// Which kernels ran between two readings of the ops' path counts: the host backend counts none.
std::string kernels_that_ran(const gpu::AttentionPathCounts& before,
                             const gpu::AttentionPathCounts& after) {
  if (after.cudnn > before.cudnn) return "cuDNN";
  if (after.tensor_core > before.tensor_core) return "tensor cores";
  if (after.cuda_core > before.cuda_core) return "CUDA cores";
  return "host";
}

double tflops(double flops, double seconds) {
  return seconds > 0 ? flops / seconds / 1e12 : 0.0;
}

// One shape's tensors on the device: random qkv and dout, the forward's out and lse, and the
// gradient the backward adds into (zeroed once: the figures do not depend on its values).
nlohmann::json measure_shape(const AttentionShape& shape, gpu::Device& device, gpu::Ops& ops,
                             DeviceOpTimer& timer, gpu::DataType type) {
  const std::int64_t rows = shape.batch * shape.seq_len;
  const std::int64_t qkv_elements = rows * (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  const std::int64_t out_elements = rows * shape.heads * shape.head_dim;
  const std::int64_t element = gpu::size_bytes(type);
  gpu::DeviceBuffer qkv = device.allocate(qkv_elements * element, "bench attention qkv");
  gpu::DeviceBuffer dqkv = device.allocate(qkv_elements * element, "bench attention dqkv");
  gpu::DeviceBuffer out = device.allocate(out_elements * element, "bench attention out");
  gpu::DeviceBuffer dout = device.allocate(out_elements * element, "bench attention dout");
  gpu::DeviceBuffer lse =
      device.allocate(shape.batch * shape.heads * shape.seq_len * 4, "bench attention lse");
  timer.fill_random({qkv.data(), type}, qkv_elements);
  timer.fill_random({dout.data(), type}, out_elements);
  gpu::Stream& stream = device.compute_stream();
  stream.fill_zero(dqkv.data(), dqkv.bytes());
  stream.synchronize();
  const auto forward = [&](gpu::Stream& on) {
    ops.attention_forward(on, {out.data(), type}, lse.as<float>(), {qkv.data(), type}, shape.batch,
                          shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim);
  };
  const gpu::AttentionPathCounts before = ops.path_counts().attention_forward;
  const double forward_s = timer.median_seconds(forward);
  const std::string kernels = kernels_that_ran(before, ops.path_counts().attention_forward);
  const double forward_backward_s = timer.median_seconds([&](gpu::Stream& on) {
    forward(on);
    ops.attention_backward(on, {dqkv.data(), type}, {dout.data(), type}, {qkv.data(), type},
                           {out.data(), type}, lse.as<float>(), shape.batch, shape.seq_len,
                           shape.heads, shape.kv_heads, shape.head_dim);
  });
  return {{"shape", shape.text},
          {"kernels", kernels},
          {"batch", shape.batch},
          {"heads", shape.heads},
          {"kv_heads", shape.kv_heads},
          {"seq_len", shape.seq_len},
          {"head_dim", shape.head_dim},
          {"forward_flops", shape.forward_flops()},
          {"forward_backward_flops", shape.forward_backward_flops()},
          {"forward_ms", forward_s * 1e3},
          {"forward_backward_ms", forward_backward_s * 1e3},
          {"forward_tflops", tflops(shape.forward_flops(), forward_s)},
          {"forward_backward_tflops", tflops(shape.forward_backward_flops(), forward_backward_s)}};
}

nlohmann::json measure(const AttentionOptions& options, const std::vector<AttentionShape>& shapes,
                       gpu::Device& device, gpu::DataType type) {
  std::unique_ptr<gpu::Ops> ops =
      gpu::create_ops(device, gpu::OpsOptions{.cudnn_attention = options.kernels == "auto"});
  DeviceOpTimer timer(device, *ops, options.repeats);
  nlohmann::json rows = nlohmann::json::array();
  for (const AttentionShape& shape : shapes)
    rows.push_back(measure_shape(shape, device, *ops, timer, type));
  nlohmann::json result = {
      {"device", device.name()},       {"backend", gpu::to_string(device.kind())},
      {"dtype", gpu::to_string(type)}, {"causal", true},
      {"repeats", options.repeats},    {"shapes", rows}};
  if (device.kind() == gpu::DeviceKind::cuda) result["target_vs_peer"] = kTargetVsSdpa;
  return result;
}

void print_result(const nlohmann::json& result) {
  fmt::print(
      "strata bench attention: causal attention through the ops of {} ({}), {}; median of {} "
      "calls, each between two events on the compute stream; forward 4*B*H*T*T*D/2 flops, "
      "forward+backward 3.5x that\n",
      result["device"].get<std::string>(), result["backend"].get<std::string>(),
      result["dtype"].get<std::string>(), result["repeats"].get<int>());
  fmt::print("{:<16} {:>8} | {:>8} {:>11} | {:>8} {:>11} | {}\n", "BxHxTxD", "kv heads", "fwd ms",
             "fwd TFLOP/s", "f+b ms", "f+b TFLOP/s", "kernels");
  for (const nlohmann::json& row : result["shapes"]) {
    fmt::print("{:<16} {:>8} | {:>8.3f} {:>11.2f} | {:>8.3f} {:>11.2f} | {}\n",
               row["shape"].get<std::string>(), row["kv_heads"].get<std::int64_t>(),
               row["forward_ms"].get<double>(), row["forward_tflops"].get<double>(),
               row["forward_backward_ms"].get<double>(),
               row["forward_backward_tflops"].get<double>(), row["kernels"].get<std::string>());
  }
  if (!result.contains("target_vs_peer")) return;
  fmt::print(
      "target: >= {:.1f}x the best of torch's scaled_dot_product_attention backends on every "
      "shape and direction: scripts/torch_sdpa_peer.py torch runs them on this command's --json\n",
      kTargetVsSdpa);
}

void run_bench_attention(const AttentionOptions& options) {
  const gpu::DeviceKind kind = parse_bench_device(options.device);
  const gpu::DataType type = parse_bench_dtype(options.dtype);
  if (options.kernels != "auto" && options.kernels != "strata") {
    throw UserError("--kernels " + options.kernels + " is not auto or strata",
                    "give --kernels strata for strata's own attention kernels, or leave it out "
                    "for cuDNN's where it takes the shape",
                    2);
  }
  std::vector<AttentionShape> shapes;
  for (const std::string& text : options.shapes)
    shapes.push_back(parse_shape(text, options.kv_heads));
  std::unique_ptr<gpu::Device> device = open_bench_device(kind);
  const nlohmann::json result = measure(options, shapes, *device, type);
  if (options.json) {
    fmt::print("{}\n", result.dump(2));
  } else {
    print_result(result);
  }
}

}  // namespace

void add_bench_attention_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<AttentionOptions>();
  CLI::App* command = bench.add_subcommand(
      "attention",
      "Measure the fused causal attention, forward and forward+backward, through the device's "
      "ops: on CUDA for scripts/torch_sdpa_peer.py");
  command->add_option("--device", options->device, "host or cuda")->capture_default_str();
  command->add_option("--dtype", options->dtype, "float32, bfloat16 or float16")
      ->capture_default_str();
  command
      ->add_option("--shape", options->shapes,
                   "Batch x heads x sequence length x head dim, repeatable")
      ->capture_default_str();
  command
      ->add_option("--kv-heads", options->kv_heads,
                   "Key/value heads, dividing each shape's heads (default: the heads)")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--kernels", options->kernels,
                   "auto: cuDNN's fused attention where it takes the shape, else strata's; "
                   "strata: strata's own kernels")
      ->capture_default_str();
  command->add_option("--repeats", options->repeats, "Timed calls per figure (the median counts)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_flag("--json", options->json, "One JSON document on stdout");
  command->callback([options] { run_bench_attention(*options); });
}

}  // namespace strata::tools
