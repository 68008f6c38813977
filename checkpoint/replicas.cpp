#include "checkpoint/replicas.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

namespace axonn {
namespace {

using Key = std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>;  // name, offset, count

struct Distinct {
  const Key* key = nullptr;
  int64_t bytes = 0;
  std::vector<std::pair<size_t, size_t>> holders;  // (rank, index in held[rank]), rank ascending
};

}  // namespace

std::vector<std::vector<size_t>> assign_writers(const std::vector<std::vector<HeldSlice>>& held) {
  std::map<Key, Distinct> distinct;
  std::map<std::string, const std::vector<int64_t>*> shapes;
  for (size_t rank = 0; rank < held.size(); ++rank) {
    for (size_t i = 0; i < held[rank].size(); ++i) {
      const HeldSlice& s = held[rank][i];
      validate_rect(s.global_shape, s.rect, "tensor '" + s.name + "'");
      auto [shape, inserted] = shapes.emplace(s.name, &s.global_shape);
      if (!inserted && *shape->second != s.global_shape) {
        throw std::invalid_argument("tensor '" + s.name + "' is held with global shapes " +
                                    shape_string(*shape->second) + " and " + shape_string(s.global_shape) + " (rank " +
                                    std::to_string(rank) + ")");
      }
      auto [it, fresh] = distinct.try_emplace(Key{s.name, s.rect.offset, s.rect.count});
      Distinct& d = it->second;
      if (fresh) {
        d.key = &it->first;
        d.bytes = element_count(s.rect) * static_cast<int64_t>(sizeof(float));
      } else if (d.holders.back().first == rank) {
        throw std::invalid_argument("rank " + std::to_string(rank) + " lists tensor '" + s.name + "' " +
                                    rect_string(s.rect) + " twice");
      }
      d.holders.emplace_back(rank, i);
    }
  }
  // Largest first, then by key: deterministic on every rank.
  std::vector<const Distinct*> order;
  order.reserve(distinct.size());
  for (const auto& [key, d] : distinct) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(),
                   [](const Distinct* a, const Distinct* b) { return a->bytes > b->bytes; });

  std::vector<int64_t> load(held.size(), 0);
  std::vector<std::vector<size_t>> writes(held.size());
  for (const Distinct* d : order) {
    const auto* best = &d->holders.front();
    for (const auto& h : d->holders) {
      if (load[h.first] < load[best->first]) best = &h;  // holders are rank-ascending: ties keep the lowest
    }
    load[best->first] += d->bytes;
    writes[best->first].push_back(best->second);
  }
  for (auto& w : writes) std::sort(w.begin(), w.end());
  return writes;
}

}  // namespace axonn
