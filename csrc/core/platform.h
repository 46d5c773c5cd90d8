// What the library asks of the operating system, in one place: the rest of csrc is portable
// C++ over ONNX Runtime's C API. Implemented for POSIX systems (Linux) and Windows.
#pragma once

#include <cstdint>

namespace ortops {

// Logical processors online in the machine (at least 1), for every processor group on
// Windows: an upper bound of the threads that can run a session's work at once.
int64_t OnlineProcessors();

}  // namespace ortops
