// The global sample order: a keyed pseudorandom permutation of the sample windows per epoch,
// evaluated one index at a time (no shuffled index array, so O(1) memory at any data size).
//
// Construction (a format-preserving permutation in the style of Black and Rogaway's
// "Ciphers with arbitrary finite domains", 2002):
//   1. Domain: the smallest 2^(2h) >= sample_count, h >= 1 (an even power of two, so an
//      index splits into two h-bit halves L and R). The domain is < 4 * sample_count.
//   2. A balanced Feistel network of 4 rounds on (L, R):  (L, R) -> (R, L xor f_r(R)), with
//      f_r(R) = splitmix64(key_r xor R) mod 2^h and key_r = a splitmix64 chain over
//      (seed, epoch, r). Each round is a bijection of the domain whatever f_r is (it is
//      undone by (L, R) -> (R xor f_r(L), L)), so the network is a permutation of the
//      domain; 4 rounds with a good mixer make it look random (Luby-Rackoff).
//   3. Cycle walking: apply the network repeatedly until the value is < sample_count. The
//      walk from x follows x's cycle of the domain permutation, which comes back to x < n,
//      so it ends; and the map it induces on [0, n) is a bijection (its inverse walks the
//      inverse network the same way). Expected steps: < 4, as the domain is < 4n.
// Only unsigned 64-bit integer arithmetic: the same order on every platform and compiler.
#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "trainer/data/token_data.hpp"

namespace axonn {
namespace {

constexpr int kRounds = 4;
// 4^31 = 2^62: the largest domain whose halves and shifts stay inside 64 bits.
constexpr int64_t kMaxSamples = int64_t{1} << 62;

// splitmix64's output function (Steele, Lea, Flood 2014): a strong 64-bit mixer.
uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The permutation of [0, n) for one epoch.
class EpochPermutation {
 public:
  EpochPermutation(uint64_t seed, uint64_t epoch, uint64_t n) : n_(n) {
    // Bits for an index in [0, n): bit_width(n-1); halves round up, at least 1 bit each.
    const int bits = static_cast<int>(std::bit_width(n - 1));
    half_bits_ = std::max(1, (bits + 1) / 2);
    mask_ = (uint64_t{1} << half_bits_) - 1;
    const uint64_t epoch_key = splitmix64(splitmix64(seed) ^ epoch);
    for (int r = 0; r < kRounds; ++r) keys_[r] = splitmix64(epoch_key ^ static_cast<uint64_t>(r));
  }

  uint64_t operator()(uint64_t index) const {
    uint64_t x = index;
    do x = network(x);
    while (x >= n_);
    return x;
  }

 private:
  uint64_t network(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & mask_;
    for (const uint64_t key : keys_) {
      const uint64_t next = left ^ (splitmix64(key ^ right) & mask_);
      left = right;
      right = next;
    }
    return left << half_bits_ | right;
  }

  uint64_t n_;
  int half_bits_ = 1;
  uint64_t mask_ = 1;
  uint64_t keys_[kRounds] = {};
};

}  // namespace

SampleOrder::SampleOrder(uint64_t seed, int64_t token_count, int sequence)
    : seed_(seed), sample_count_(0), sequence_(sequence) {
  if (sequence < 1) throw std::invalid_argument("SampleOrder: sequence must be >= 1, got " + std::to_string(sequence));
  sample_count_ = token_count > 1 ? (token_count - 1) / sequence : 0;
  if (sample_count_ < 1)
    throw DataError(std::to_string(token_count) + " tokens hold no sample of " + std::to_string(sequence + 1) +
                    " tokens (sequence " + std::to_string(sequence) + " + 1); use more data or a shorter sequence");
  if (sample_count_ > kMaxSamples)
    throw DataError(std::to_string(sample_count_) + " samples are more than the sample order handles (2^62)");
}

int64_t SampleOrder::sample_start(int64_t global_sample) const {
  if (global_sample < 0)
    throw std::out_of_range("SampleOrder: global sample index must be >= 0, got " + std::to_string(global_sample));
  const auto n = static_cast<uint64_t>(sample_count_);
  const auto g = static_cast<uint64_t>(global_sample);
  if (n == 1) return 0;
  const EpochPermutation permutation(seed_, g / n, n);
  return static_cast<int64_t>(permutation(g % n)) * sequence_;
}

}  // namespace axonn
