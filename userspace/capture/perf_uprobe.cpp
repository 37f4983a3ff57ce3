#include "perf_uprobe.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/read_file.h"

namespace lotus::capture {

namespace {

// The uprobe PMU's type, and the config bit that makes a return probe ("config:0" in its format), from sysfs;
// -1 where there is none.
struct UprobePmu {
    int type = -1;
    int retprobe_bit = -1;
};

const UprobePmu& uprobe_pmu()
{
    static const UprobePmu pmu = [] {
        UprobePmu p;
        if (auto t = common::read_file("/sys/bus/event_source/devices/uprobe/type"))
            p.type = atoi(t->c_str());
        if (auto f = common::read_file("/sys/bus/event_source/devices/uprobe/format/retprobe");
            f && f->rfind("config:", 0) == 0)
            p.retprobe_bit = atoi(f->c_str() + 7);
        return p;
    }();
    return pmu;
}

} // namespace

common::UniqueFd perf_uprobe_link(int prog_fd, const std::string& path, uint64_t offset, uint64_t cookie, bool ret,
                                  int pid)
{
    const auto& pmu = uprobe_pmu();
    if (pmu.type < 0 || (ret && pmu.retprobe_bit < 0)) {
        errno = EOPNOTSUPP;
        return {};
    }
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = static_cast<uint32_t>(pmu.type);
    attr.config = ret ? 1ull << pmu.retprobe_bit : 0;
    attr.config1 = reinterpret_cast<uint64_t>(path.c_str());
    attr.config2 = offset;
    // Every process (pid -1) needs a CPU named, any one: a uprobe fires on whichever CPU runs the call.
    common::UniqueFd event(
        static_cast<int>(syscall(__NR_perf_event_open, &attr, pid, pid == -1 ? 0 : -1, -1, PERF_FLAG_FD_CLOEXEC)));
    if (!event)
        return {};
    LIBBPF_OPTS(bpf_link_create_opts, opts, .perf_event = {.bpf_cookie = cookie});
    // The link keeps the event open; this descriptor of it may go.
    return common::UniqueFd(bpf_link_create(prog_fd, event.get(), BPF_PERF_EVENT, &opts));
}

} // namespace lotus::capture
