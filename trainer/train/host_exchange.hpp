#pragma once
// The run's small host-side exchanges (resume steps, mismatch counts, memory figures) over
// a communicator whose collectives take the backend's buffers: host values go through
// device buffers when the backend's memory is not the host's (CUDA backend, NCCL grid),
// and are read back once the collective has finished.
#include <vector>

#include "comm/communicator.hpp"
#include "trainer/backend.hpp"

namespace axonn {

// mine (n) from every rank of `group` -> (n · size), rank r's values at r·n.
std::vector<float> all_gather_floats(Backend& backend, Communicator& group, const std::vector<float>& mine);

}  // namespace axonn
