#include "gpu/host/solo_comm.h"

#include "base/assert.h"

namespace strata::gpu::host {
namespace {

class SoloComm final : public Comm {
 public:
  explicit SoloComm(World& world) : world_(world) {
    STRATA_ASSERT(world.world_size() == 1);
    world_.add_comm();
  }
  ~SoloComm() override { world_.remove_comm(); }
  SoloComm(const SoloComm&) = delete;
  SoloComm& operator=(const SoloComm&) = delete;

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string_view backend() const override { return "solo"; }

  void all_gather(Stream& stream, const void* send, void* receive, std::int64_t count_per_rank,
                  DataType type) override {
    begin_collective(CollectiveKind::all_gather, send, receive, count_per_rank, type);
    copy(stream, receive, send, count_per_rank * size_bytes(type));
  }

  // One rank's reduction is its own value: sum and max are the identity, and so is avg, since
  // x / 1 is x exactly (the MPI backend computes the same bits).
  void reduce_scatter(Stream& stream, const void* send, void* receive, std::int64_t count_per_rank,
                      DataType type, ReduceOp /*op*/) override {
    begin_collective(CollectiveKind::reduce_scatter, send, receive, count_per_rank, type);
    copy(stream, receive, send, count_per_rank * size_bytes(type));
  }

  void all_reduce(Stream& /*stream*/, void* data, std::int64_t count_elements, DataType type,
                  ReduceOp /*op*/) override {
    begin_collective(CollectiveKind::all_reduce, data, data, count_elements, type);
  }

  // The root is the only rank: it sends its data to nobody else.
  void broadcast(Stream& /*stream*/, void* data, std::int64_t count_elements, DataType type,
                 int root) override {
    begin_collective(CollectiveKind::broadcast, data, data, count_elements, type, root);
  }

  void barrier() override {}

 private:
  // In place (the same pointer) there is nothing to move; stream copies may not overlap.
  static void copy(Stream& stream, void* target, const void* source, std::int64_t bytes) {
    if (bytes == 0 || target == source) return;
    stream.copy(target, source, bytes, CopyKind::device_to_device);
  }

  World& world_;
};

}  // namespace

std::unique_ptr<Comm> create_solo_comm(World& world) {
  return std::make_unique<SoloComm>(world);
}

}  // namespace strata::gpu::host
