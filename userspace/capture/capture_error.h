// The error every capture unit throws: what could not be loaded, attached or read, in one line for the user.
#pragma once
#include <stdexcept>

namespace lotus::capture {

struct CaptureError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

} // namespace lotus::capture
