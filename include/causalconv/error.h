// The one error type of the core. Its kind decides the Python exception.
#pragma once

#include <stdexcept>
#include <string>

namespace causalconv {

enum class ErrorKind : int {
  invalid_argument = 0,  // -> ValueError: the caller passed something outside the contract
  not_implemented = 1,   // -> NotImplementedError: valid, but not built into this library
  runtime = 2,           // -> RuntimeError: CUDA failure, or no kernel for this GPU
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace causalconv
