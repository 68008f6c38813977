#pragma once
// A group of one: every collective is a copy (or nothing), so code can call the same
// collectives whatever the layout. Counts no bytes (layout_volume.hpp omits such groups).
#include <cstring>

#include "comm/communicator.hpp"

namespace axonn {

class SingleRankCommunicator final : public Communicator {
 public:
  SingleRankCommunicator(std::string name, int world_rank) : name_(std::move(name)), members_{world_rank} {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& members() const override { return members_; }
  const std::string& name() const override { return name_; }
  void all_reduce(void*, size_t, ElementType) override {}
  void all_gather(const void* in, void* out, size_t count, ElementType type) override { copy(in, out, count, type); }
  void reduce_scatter(const void* in, void* out, size_t count, ElementType type) override {
    copy(in, out, count, type);
  }
  void broadcast(void*, size_t, int, ElementType) override {}
  void all_to_all(const void* in, void* out, size_t count, ElementType type) override { copy(in, out, count, type); }
  void all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                   const std::vector<size_t>& recv_counts, ElementType type) override {
    (void)all_to_allv_bytes(send_counts, recv_counts, type);  // checks the counts: one block, the same both ways
    copy(in, out, send_counts[0], type);
  }
  void barrier() override {}

 private:
  static void copy(const void* in, void* out, size_t count, ElementType type) {
    if (in != out) std::memmove(out, in, count * element_size(type));
  }
  std::string name_;
  std::vector<int> members_;
};

}  // namespace axonn
