// Error types. Every user-facing failure is one of these, with one clear message;
// the CLI prints what() and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace kortex {

// Invalid parameters or image shape (bad sigma, radius too large, 4D input ...).
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// File missing, unreadable, corrupt, unsupported or unwritable.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A requested backend/variant is not available in this build.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kortex
