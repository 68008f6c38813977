#pragma once
// Argument checks of the CPU ops: a bad size throws BackendError naming the op and the value
// instead of reading past a buffer. O(1) per call.
#include <cstdint>
#include <string>

#include "trainer/backend.hpp"

namespace axonn::cpu {

[[noreturn]] inline void fail(const char* op, const std::string& what) {
  throw BackendError(std::string(op) + ": " + what);
}

inline void require_nonnegative(const char* op, const char* name, int64_t value) {
  if (value < 0) fail(op, std::string(name) + " = " + std::to_string(value) + " must not be negative");
}

inline void require_positive(const char* op, const char* name, int64_t value) {
  if (value <= 0) fail(op, std::string(name) + " = " + std::to_string(value) + " must be positive");
}

// A local width against the full width it is a part of (LayerNorm's c <= C).
inline void require_at_most(const char* op, const char* name, int64_t value, const char* limit_name, int64_t limit) {
  if (value > limit)
    fail(op,
         std::string(name) + " = " + std::to_string(value) + " exceeds " + limit_name + " = " + std::to_string(limit));
}

}  // namespace axonn::cpu
