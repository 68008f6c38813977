#pragma once
// The data tests' check of a refusal: `f` throws DataError, and its message says each of the
// things a user needs (the file, the field, the value, the fix).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainer/data/token_data.hpp"

namespace axonn::test {

// Runs `f`, expecting a DataError whose message contains every one of `parts`.
template <typename F>
void expect_data_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    const std::string message = e.what();
    for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
  }
}

}  // namespace axonn::test
