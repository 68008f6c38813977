#pragma once
// The environment variables the commands read (AXONN_SITE_CONFIG, AXONN_LAYOUT, SLURM_*).
#include <optional>
#include <string>

namespace axonn {

// The value of `name`; nullopt when it is unset or empty (an empty variable sets nothing).
std::optional<std::string> environment(const char* name);

}  // namespace axonn
