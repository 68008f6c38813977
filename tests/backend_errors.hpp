#pragma once
// For the backends' bad-argument tests: an op called with a bad size must throw a
// BackendError whose message contains `needle` (the op and the value).
#include <gtest/gtest.h>

#include <string>

#include "trainer/backend.hpp"

namespace axonn::test {

template <typename Call>
void expect_backend_error(Call&& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no BackendError; expected one mentioning \"" << needle << "\"";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace axonn::test
