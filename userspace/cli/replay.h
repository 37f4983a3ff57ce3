// Replaying a record file (--replay, export, report): the stream as captured, through the same engine and the
// same end of run as a live session.
#pragma once
#include "options.h"

namespace lotus::cli {

// Reconstructs opts.replay (a record file). Throws; leaves no half-written trace behind.
int replay(const Options& opts);

} // namespace lotus::cli
