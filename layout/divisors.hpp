#pragma once
// Divisors of a positive count, ascending. The chooser and its no-fit hint enumerate these
// instead of ranges of integers, so their work grows with the number of divisors (at most 240
// below 10^6, 448 below 2^24), not with the count itself.
#include <cstdint>
#include <vector>

namespace axonn {

// Every d with n % d == 0, ascending; empty for n < 1. O(sqrt(n)).
std::vector<int64_t> divisors(int64_t n);

}  // namespace axonn
