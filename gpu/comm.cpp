#include "gpu/comm.h"

#include "base/assert.h"

namespace strata::gpu {

std::string_view to_string(DataType type) {
  switch (type) {
    case DataType::float32:
      return "float32";
    case DataType::bfloat16:
      return "bfloat16";
    case DataType::float16:
      return "float16";
    case DataType::int32:
      return "int32";
    case DataType::int64:
      return "int64";
    case DataType::uint8:
      return "uint8";
  }
  return "unknown";
}

std::int64_t size_bytes(DataType type) {
  switch (type) {
    case DataType::float32:
    case DataType::int32:
      return 4;
    case DataType::bfloat16:
    case DataType::float16:
      return 2;
    case DataType::int64:
      return 8;
    case DataType::uint8:
      return 1;
  }
  STRATA_ASSERT(false);
  return 0;
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
  }
  return "unknown";
}

std::string_view to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::broadcast:
      return "broadcast";
  }
  return "unknown";
}

CommCounters Comm::counters() const {
  CommCounters counters;
  for (std::size_t i = 0; i < traffic_.size(); ++i) {
    counters.by_kind[i].calls = traffic_[i].calls.load();
    counters.by_kind[i].bytes_sent = traffic_[i].bytes_sent.load();
    counters.by_kind[i].bytes_received = traffic_[i].bytes_received.load();
  }
  return counters;
}

void Comm::reset_counters() {
  for (AtomicTraffic& traffic : traffic_) {
    traffic.calls = 0;
    traffic.bytes_sent = 0;
    traffic.bytes_received = 0;
  }
}

void Comm::begin_collective(CollectiveKind kind, const void* send, const void* receive,
                            std::int64_t count, DataType type, int root) {
  STRATA_ASSERT(count >= 0);
  STRATA_ASSERT(count == 0 || send != nullptr);
  STRATA_ASSERT(count == 0 || receive != nullptr);
  const std::int64_t bytes = count * size_bytes(type);
  const std::int64_t ranks = world_size();
  std::int64_t bytes_sent = bytes;
  std::int64_t bytes_received = bytes;
  switch (kind) {
    case CollectiveKind::all_gather:
      bytes_received = bytes * ranks;
      break;
    case CollectiveKind::reduce_scatter:
      bytes_sent = bytes * ranks;
      break;
    case CollectiveKind::all_reduce:
      break;
    case CollectiveKind::broadcast: {
      STRATA_ASSERT(root >= 0);
      STRATA_ASSERT(root < world_size());
      const bool is_root = root == rank();
      bytes_sent = is_root ? bytes : 0;
      bytes_received = is_root ? 0 : bytes;
      break;
    }
  }
  AtomicTraffic& traffic = traffic_[static_cast<std::size_t>(kind)];
  traffic.calls += 1;
  traffic.bytes_sent += bytes_sent;
  traffic.bytes_received += bytes_received;
}

}  // namespace strata::gpu
