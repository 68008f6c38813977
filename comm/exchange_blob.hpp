#pragma once
// (key, value) pairs <-> one byte blob, so one Exchange put carries many values:
// u32 count, then per pair u32 key length, key, u32 value length, value
// (host byte order: every rank of a job shares one architecture).
#include <map>
#include <string>
#include <vector>

namespace axonn {

using BlobPairs = std::map<std::string, std::vector<char>>;

std::vector<char> pack_pairs(const BlobPairs& pairs);
BlobPairs unpack_pairs(const std::vector<char>& blob);  // throws CommError if truncated

}  // namespace axonn
