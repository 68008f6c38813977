#include "trainer/model/parameter_store.hpp"

#include "trainer/model/init.hpp"

namespace axonn {

ParameterStore::ParameterStore(Backend& backend, const ModelShape& model, const Layout& layout, const Coords& coords)
    : backend_(backend),
      layout_(parameter_layout(model, layout, coords)),
      params_(backend, static_cast<size_t>(layout_.total)),
      grads_(backend, static_cast<size_t>(layout_.total)),
      adam_m_(backend, static_cast<size_t>(layout_.total)),
      adam_v_(backend, static_cast<size_t>(layout_.total)) {}

void ParameterStore::initialize(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(layout_.total));
  for (const auto& s : layout_.slots) init_shard(s.spec, s.rect, seed, host.data() + s.offset);
  params_.upload(host);
  zero_grads();
  backend_.memset_zero(adam_m_.data(), adam_m_.bytes());
  backend_.memset_zero(adam_v_.data(), adam_v_.bytes());
}

void ParameterStore::zero_grads() { backend_.memset_zero(grads_.data(), grads_.bytes()); }

}  // namespace axonn
