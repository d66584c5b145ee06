#include "gpu/counting/counting_comm.h"

#include "base/assert.h"

namespace strata::gpu::counting {
namespace {

class CountingComm final : public Comm {
 public:
  CountingComm(int world_size, int rank) : world_size_(world_size), rank_(rank) {
    STRATA_ASSERT(world_size >= 1 && rank >= 0 && rank < world_size);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend() const override { return "counting"; }

  void all_gather(Stream&, const void* send, void* receive, std::int64_t count_per_rank,
                  DataType type) override {
    begin_collective(CollectiveKind::all_gather, send, receive, count_per_rank, type);
  }
  void reduce_scatter(Stream&, const void* send, void* receive, std::int64_t count_per_rank,
                      DataType type, ReduceOp) override {
    begin_collective(CollectiveKind::reduce_scatter, send, receive, count_per_rank, type);
  }
  void all_reduce(Stream&, void* data, std::int64_t count, DataType type, ReduceOp) override {
    begin_collective(CollectiveKind::all_reduce, data, data, count, type);
  }
  void broadcast(Stream&, void* data, std::int64_t count, DataType type, int root) override {
    begin_collective(CollectiveKind::broadcast, data, data, count, type, root);
  }
  void barrier() override {}

 private:
  int world_size_;
  int rank_;
};

}  // namespace

std::unique_ptr<Comm> create_counting_comm(int world_size, int rank) {
  return std::make_unique<CountingComm>(world_size, rank);
}

}  // namespace strata::gpu::counting
