// Errors raised by kernels. Every ortops error is an ortops::Error; the op adapter turns it
// (and any other exception) into an OrtStatus whose message names the op, so nothing
// thrown here ever crosses the C API.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ortops {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Parts>
[[noreturn]] void Fail(Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  throw Error(message.str());
}

// Check(cond, "input 'boxes' must be ...", shape) throws Error with the parts concatenated.
template <typename... Parts>
void Check(bool condition, Parts&&... parts) {
  if (!condition) Fail(std::forward<Parts>(parts)...);
}

}  // namespace ortops
