#pragma once
// Skipping a `gpu` test, visibly, where the machine lacks the GPUs it needs.
#include <gtest/gtest.h>

#include <string>

#include "comm/cuda_device.hpp"

// Skips the test unless `n` CUDA devices are visible, with the reason in the message
// ("no CUDA device: <the CUDA runtime's error>", or how many it found).
#define REQUIRE_CUDA_DEVICES(n)                                                 \
  do {                                                                          \
    std::string why;                                                            \
    const int have = ::axonn::cuda_device_count(&why);                          \
    if (have == 0) GTEST_SKIP() << "no CUDA device: " << why;                   \
    if (have < (n))                                                             \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " << have        \
                   << ": NCCL runs each rank of a communicator on its own GPU"; \
  } while (0)
