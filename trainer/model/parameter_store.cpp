#include "trainer/model/parameter_store.hpp"

#include <algorithm>

#include "trainer/model/init.hpp"

namespace axonn {
namespace {

int64_t run_elements(const std::vector<StateRun>& runs, size_t count) {
  int64_t n = 0;
  for (size_t i = 0; i < count && i < runs.size(); ++i) n += runs[i].count;
  return n;
}

}  // namespace

ParameterStore::ParameterStore(Backend& backend, const ModelShape& model, const Layout& layout, const Coords& coords,
                               bool shard_optimizer)
    : backend_(backend),
      layout_(parameter_layout(model, layout, coords, shard_optimizer)),
      runs_(optimizer_state_runs(layout_, coords.data)),
      state_size_(run_elements(runs_, runs_.size())),
      master_sharded_(layout_.pieces > 1 && backend.activation_type() != ElementType::float32) {
  // Sharded, the runs are the buckets' pieces in bucket order: all but the last (the small
  // tensors) are the weight buckets'.
  if (master_sharded_) master_size_ = run_elements(runs_, runs_.size() - 1);
  params_ = DeviceBuffer<float>(backend,
                                static_cast<size_t>(master_sharded_ ? layout_.total - layout_.sharded : layout_.total));
  grads_ = DeviceBuffer<float>(backend, static_cast<size_t>(layout_.total));
  adam_m_ = DeviceBuffer<float>(backend, static_cast<size_t>(state_size_));
  adam_v_ = DeviceBuffer<float>(backend, static_cast<size_t>(state_size_));
  master_ = DeviceBuffer<float>(backend, static_cast<size_t>(master_size_));
  const ElementType type = backend.activation_type();
  if (type == ElementType::float32) {
    weights_ = ActPtr(params_.data());
  } else {
    weights_copy_ = DeviceBuffer<std::byte>(backend, static_cast<size_t>(layout_.sharded) * element_size(type));
    weights_ = ActPtr(weights_copy_.data(), type);
  }
}

float* ParameterStore::params_at(int64_t offset) {
  if (!master_sharded_) return params_.data() + offset;
  if (offset < layout_.sharded)
    throw BackendError("ParameterStore: the float32 weights at offset " + std::to_string(offset) +
                       " are sharded over data (master()); only the small tensors are whole");
  return params_.data() + (offset - layout_.sharded);
}

float* ParameterStore::params() {
  if (master_sharded_)
    throw BackendError(
        "ParameterStore: with the optimizer sharded under mixed precision the float32 weights are master()'s pieces; "
        "the whole weights are the bf16 copy");
  return params_.data();
}

void ParameterStore::refresh_weights() {
  if (weights_copy_.size() == 0 || master_sharded_) return;
  backend_.convert(weights_, params_.data(), layout_.sharded);
}

void ParameterStore::set_params(const float* host) {
  if (!master_sharded_) {
    backend_.copy_to_device(params_.data(), host, params_.bytes());
    refresh_weights();
    backend_.synchronize();  // before `host` goes
    return;
  }
  const size_t sharded = static_cast<size_t>(layout_.sharded);
  backend_.copy_to_device(params_.data(), host + sharded, params_.bytes());
  for (size_t i = 0; i + 1 < runs_.size(); ++i)
    backend_.copy_to_device(master_.data() + runs_[i].state_offset, host + runs_[i].offset,
                            static_cast<size_t>(runs_[i].count) * sizeof(float));
  // The bf16 copy of the whole weights, through a float32 buffer of at most 4M elements.
  const size_t chunk = std::min<size_t>(sharded, size_t{1} << 22);
  DeviceBuffer<float> staging(backend_, chunk);
  for (size_t at = 0; at < sharded; at += chunk) {
    const size_t n = std::min(chunk, sharded - at);
    backend_.copy_to_device(staging.data(), host + at, n * sizeof(float));
    backend_.convert(weights_ + static_cast<int64_t>(at), staging.data(), static_cast<int64_t>(n));
  }
  backend_.synchronize();  // before `host` and the staging buffer go
}

void ParameterStore::initialize(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(layout_.total), 0.0f);
  std::vector<ShardInit> shards;
  for (const auto& s : layout_.slots) shards.push_back({&s.spec, s.rect, host.data() + s.offset});
  init_shards(shards, seed);
  set_params(host.data());
  zero_grads();
  backend_.memset_zero(adam_m_.data(), adam_m_.bytes());
  backend_.memset_zero(adam_v_.data(), adam_v_.bytes());
}

void ParameterStore::zero() {
  const auto clear = [&](auto& buffer) {
    if (buffer.bytes() > 0) backend_.memset_zero(buffer.data(), buffer.bytes());
  };
  clear(params_);
  clear(master_);
  clear(weights_copy_);
  clear(grads_);
  clear(adam_m_);
  clear(adam_v_);
}

void ParameterStore::zero_grads() { backend_.memset_zero(grads_.data(), grads_.bytes()); }

}  // namespace axonn
