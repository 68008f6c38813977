#pragma once
// Argument checks of the CPU ops: the ones every backend shares (trainer/op_checks.hpp), so a
// bad size reads the same on the CPU and the GPU.
#include "trainer/op_checks.hpp"

namespace axonn::cpu {

using op_checks::fail;
using op_checks::require_at_most;
using op_checks::require_nonnegative;
using op_checks::require_positive;

}  // namespace axonn::cpu
