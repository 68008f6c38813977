#pragma once
// The run's small host-side exchanges (resume steps, mismatch counts, memory figures) over
// a communicator whose collectives take the backend's buffers: host values go through
// device buffers when the backend's memory is not the host's (CUDA backend, NCCL grid),
// and are read back once the collective has finished.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "trainer/backend.hpp"

namespace axonn {

// mine (n) from every rank of `group` -> (n · size), rank r's values at r·n.
std::vector<float> all_gather_floats(Backend& backend, Communicator& group, const std::vector<float>& mine);

// One integer (a step number, a byte count, a small negative code) from every rank: [size],
// rank r's at r. Exact for |value| < 2^43: it travels as two floats of 20 bits and a
// sign-carrying high part.
std::vector<int64_t> all_gather_integers(Backend& backend, Communicator& group, int64_t value);
// The same for n integers a rank: (n · size), rank r's at r·n.
std::vector<int64_t> all_gather_integers(Backend& backend, Communicator& group, const std::vector<int64_t>& mine);

// Lists of any length from every rank: [size], rank r's list as it gave it (each padded to the
// longest for the gather, the padding dropped).
std::vector<std::vector<int64_t>> all_gather_integer_lists(Backend& backend, Communicator& group,
                                                           const std::vector<int64_t>& mine);

// Bytes of any length from every rank: [size], rank r's. They travel three to a float (exact
// below 2^24), padded to the longest rank's: for tables of a few KiB a rank, not for data.
std::vector<std::string> all_gather_bytes(Backend& backend, Communicator& group, const std::string& mine);

}  // namespace axonn
