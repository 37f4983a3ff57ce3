// Probe: new children of traced processes held until their probes are attached (holds.bpf.h), the guardian
// that bounds those holds, and their release.
#include "probe.h"

#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "common/clock.h"
#include "guardian.h"
#include "lotus_abi.h"
#include "perf_uprobe.h"
#include "lotus.skel.h"
#include "probe_internal.h"

namespace lotus::capture {

// How long a continued child counts as still starting (let_children_start waits for its getppid or exit): one
// that has not called getppid by then never will soon.
constexpr uint64_t kStartingNs = 2'000'000'000ull;

void Probe::hold_exec_of(const std::string& path)
{
    struct stat st{};
    if (!skel_ || !hold_ || ::stat(path.c_str(), &st) != 0)
        return;
    for (auto& ino : skel_->bss->exec_inodes) {
        if (ino == st.st_ino)
            return;
        if (!ino) {
            ino = st.st_ino;
            return;
        }
    }
}

void Probe::start_guardian()
{
    hold_exec_of(interp_.object_path);
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    bpf_program* holder = hold_self_ ? skel_->progs.on_child_start : skel_->progs.on_fork_hold;
    if (bpf_obj_get_info_by_fd(bpf_program__fd(holder), &info, &len))
        throw CaptureError(fmt::format("cannot read the hold program's id: {}", strerror(errno)));
    guardian_ = std::make_unique<Guardian>(bpf_map__fd(skel_->maps.lotus_held), info.id, hold_deadline_ns_);
    if (job_ > 0) // out of the tracer's cgroup before any hold can be made: it must not die with the tracer
        guardian_cgroups_ = place_guardian(guardian_->pid(), job_);
    skel_->bss->tracer_tgid = static_cast<uint32_t>(getpid());
    skel_->bss->guardian_tgid = static_cast<uint32_t>(guardian_->pid());
    if (!hold_self_)
        return;
    // Without the kfuncs BPF knows the two by their task structs, found by a task iterator.
    Link link(bpf_program__attach_iter(skel_->progs.find_keepers, nullptr));
    common::UniqueFd it(link ? bpf_iter_create(bpf_link__fd(link.get())) : -1);
    if (!it)
        throw CaptureError(fmt::format("cannot run the BPF task iterator that finds the tracer: {}", strerror(errno)));
    char buf[64];
    while (::read(it.get(), buf, sizeof(buf)) > 0) {
    }
    if (!skel_->bss->tracer_task || !skel_->bss->guardian_task)
        throw CaptureError("the BPF task iterator did not find the tracer and its guardian");
}

void Probe::attach_self_holds()
{
    attach_tracepoint(skel_->progs.on_fork_note, skel_->links.on_fork_note, "sched_process_fork");
    attach_tracepoint(skel_->progs.on_exec_stop, skel_->links.on_exec_stop, "sched_process_exec");
    // Every process of the interpreter traps there, once per fork: a child of a traced process stops itself.
    bpf_program* prog = skel_->progs.on_child_start;
    child_start_link_ = multi_type_ >= 0 ? multi_link(prog, multi_type_, pin(interp_.object_path),
                                                      {*after_fork_offset_})
                                         : perf_uprobe_link(bpf_program__fd(prog), pin(interp_.object_path),
                                                            *after_fork_offset_, 0, false, -1);
    if (!child_start_link_)
        throw CaptureError(fmt::format("cannot probe PyOS_AfterFork_Child in {}: {}", interp_.object_path,
                                       strerror(errno)));
}

void Probe::release_held(bool attach, bool all)
{
    // Read before the walk: a child held during it moves the count again, and the next call walks again.
    uint64_t held = __atomic_load_n(&skel_->bss->held_total, __ATOMIC_ACQUIRE);
    if (held == held_walked_ && !all)
        return;
    held_walked_ = held;
    int fd = bpf_map__fd(skel_->maps.lotus_held);
    for (uint32_t tgid : tgid_keys(fd)) {
        lotus_hold hold{};
        // ATTACHED: the guardian continues it once its job runs again. SHARED_MM: a vfork-like child, until its
        // exec (holds.bpf.h).
        // PENDING: a child that will hold itself, or never runs Python (holds.bpf.h).
        if (bpf_map_lookup_elem(fd, &tgid, &hold) != 0 ||
            (hold.flags & (LOTUS_HOLD_ATTACHED | LOTUS_HOLD_SHARED_MM | LOTUS_HOLD_PENDING)))
            continue;
        // A new process: any links under its pid were an earlier process's (ProcessLinks::add).
        uint64_t before = common::monotonic_ns();
        bool attached = attach && python_on_;
        bool parents_image = (hold.flags & LOTUS_HOLD_STOPPED) && !(hold.flags & LOTUS_HOLD_AT_EXEC);
        if (attached)
            attach_python_to(tgid, parents_image ? hold.parent_tgid : 0);
        // Again: the guardian may have continued it meanwhile (its deadline passed).
        if (bpf_map_lookup_elem(fd, &tgid, &hold) != 0)
            continue; // gone with its process: the guardian forgot it
        uint64_t t = common::monotonic_ns();
        uint64_t d = t > hold.since_ns ? t - hold.since_ns : 0;
        if (!(hold.flags & LOTUS_HOLD_STOPPED) || (hold.flags & LOTUS_HOLD_RELEASED)) {
            // It ran before its probes were in: not held, or continued by the guardian.
            bpf_map_delete_elem(fd, &tgid);
            holds_.deadline_released += (hold.flags & LOTUS_HOLD_RELEASED) ? 1 : 0;
            if (attached) {
                holds_.unseen_children++;
                holds_.unseen_total_ns += d;
                holds_.unseen_max_ns = std::max(holds_.unseen_max_ns, d);
            }
            continue;
        }
        if (stop_under_way(static_cast<pid_t>(hold.parent_tgid))) {
            // The job was stopped by its user: not ours to continue. The guardian does once the parent runs.
            hold.flags |= LOTUS_HOLD_ATTACHED;
            bpf_map_update_elem(fd, &tgid, &hold, BPF_EXIST);
        } else if (bpf_map_delete_elem(fd, &tgid) == 0) {
            continue_held(fd, tgid, hold);
        }
        holds_.attach_ns += t - before;
        std::erase_if(starting_, [&](const auto& kv) { return t - kv.second > kStartingNs; });
        starting_[tgid] = t;
        holds_.children++;
        holds_.total_ns += d;
        holds_.max_ns = std::max(holds_.max_ns, d);
    }
}

size_t Probe::let_children_start(int wait_ms)
{
    if (!hold_)
        return 0;
    release_held(true, true);
    uint64_t now = common::monotonic_ns(), until = now + static_cast<uint64_t>(wait_ms) * 1'000'000ull;
    while (true) {
        std::erase_if(starting_, [&](const auto& kv) { return now - kv.second > kStartingNs; });
        if (starting_.empty() || now >= until)
            return starting_.size();
        poll(10); // their GETPPID or EXIT records erase them
        now = common::monotonic_ns();
    }
}

} // namespace lotus::capture
