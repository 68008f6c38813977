#include "trainer/model/parameter_store.hpp"

#include "trainer/model/init.hpp"

namespace axonn {
namespace {

int64_t state_elements(const std::vector<StateRun>& runs) {
  int64_t n = 0;
  for (const StateRun& r : runs) n += r.count;
  return n;
}

}  // namespace

ParameterStore::ParameterStore(Backend& backend, const ModelShape& model, const Layout& layout, const Coords& coords,
                               bool shard_optimizer)
    : backend_(backend),
      layout_(parameter_layout(model, layout, coords, shard_optimizer)),
      runs_(optimizer_state_runs(layout_, coords.data)),
      state_size_(state_elements(runs_)),
      params_(backend, static_cast<size_t>(layout_.total)),
      grads_(backend, static_cast<size_t>(layout_.total)),
      adam_m_(backend, static_cast<size_t>(state_size_)),
      adam_v_(backend, static_cast<size_t>(state_size_)) {}

void ParameterStore::initialize(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(layout_.total), 0.0f);
  for (const auto& s : layout_.slots) init_shard(s.spec, s.rect, seed, host.data() + s.offset);
  params_.upload(host);
  zero_grads();
  backend_.memset_zero(adam_m_.data(), adam_m_.bytes());
  backend_.memset_zero(adam_v_.data(), adam_v_.bytes());
}

void ParameterStore::zero_grads() { backend_.memset_zero(grads_.data(), grads_.bytes()); }

}  // namespace axonn
