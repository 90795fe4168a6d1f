// Expectation that a call is rejected as a bad argument with a useful message.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "causalconv/error.h"

namespace causalconv::test {

// Runs f, expects an invalid_argument Error whose message starts "<op>: <arg>" and
// says what was expected and what was got.
template <class F>
void expect_invalid_argument(F&& f, const std::string& op, const std::string& arg) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one about " << arg;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << message;
    EXPECT_NE(message.find(op + ": " + arg), std::string::npos) << message;
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
    EXPECT_NE(message.find("got"), std::string::npos) << message;
  }
}

}  // namespace causalconv::test
