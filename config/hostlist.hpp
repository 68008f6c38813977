#pragma once
// Slurm-style host lists, as site admins write them in site configs and as `scontrol show
// hostnames` expands them: "nid[001-004,007],login1" -> nid001 nid002 nid003 nid004 nid007
// login1. A range keeps the zero padding of its lower bound ("[08-10]" -> 08 09 10); several
// bracket groups in one name multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2).
#include <string>
#include <vector>

namespace axonn {

// Throws ConfigError (no file position; the caller adds it) naming the expression and the
// fault: an unmatched bracket, a range that is not "lo-hi" with lo <= hi in decimal digits,
// or more than kMaxHostlistNames names.
std::vector<std::string> expand_hostlist(const std::string& expression);

inline constexpr size_t kMaxHostlistNames = 1'000'000;

}  // namespace axonn
