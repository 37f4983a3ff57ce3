#include "dump.h"

#include <fmt/format.h>

#include "common/printable.h"
#include "process_dump.h"
#include "proc/proc_maps.h"

namespace lotus::cli {

int run_dump(int pid, bool native)
{
    if (!proc::process_exists(pid)) {
        fmt::print(stderr, "lotus-bpf: no such process: {}\n", pid);
        return 1;
    }
    auto root = dump_process(pid, native);
    if (!root.error.empty()) {
        fmt::print(stderr, "lotus-bpf: PID {}: {}\n", pid, common::printable(root.error));
        return 1;
    }
    fmt::print("{}", format_dump(root));
    // Its descendants: DataLoader workers (forked, or through spawn's and forkserver's own processes).
    for (int child : proc::descendants(pid))
        fmt::print("\n{}", format_dump(dump_process(child, native)));
    return 0;
}

} // namespace lotus::cli
