#pragma once
// Small formatting shared by the `axonn ckpt` subcommands' tables.
#include <cstdint>
#include <string>

namespace axonn {

// "512 B", "12.5 KiB", "1.25 MiB", "3.10 GiB": sizes in tables (tensors of a tiny model are
// KiB, of a real one GiB).
std::string human_bytes(int64_t bytes);
// "1 rank", "4 ranks".
std::string ranks_text(int64_t ranks);

}  // namespace axonn
