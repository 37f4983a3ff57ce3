#include "holds.h"

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
#include "lotus.skel.h"
#include "probe_internal.h"

namespace lotus::capture {

// How long a continued child counts as still starting (let_children_start waits for its getppid or exit): one
// that has not called getppid by then never will soon.
constexpr uint64_t kStartingNs = 2'000'000'000ull;

Holds::Holds(lotus_bpf* skel, bool hold_self, uint64_t deadline_ns, pid_t job, Attach attach)
    : skel_(skel), hold_self_(hold_self), hold_deadline_ns_(deadline_ns), job_(job), attach_(std::move(attach))
{
}

Holds::~Holds() = default;

void Holds::hold_exec_of(const std::string& path)
{
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0)
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

void Holds::start_guardian(const std::string& interp_path)
{
    hold_exec_of(interp_path);
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
    std::unique_ptr<bpf_link, int (*)(bpf_link*)> link(bpf_program__attach_iter(skel_->progs.find_keepers, nullptr),
                                                       bpf_link__destroy);
    common::UniqueFd it(link ? bpf_iter_create(bpf_link__fd(link.get())) : -1);
    if (!it)
        throw CaptureError(fmt::format("cannot run the BPF task iterator that finds the tracer: {}", strerror(errno)));
    char buf[64];
    while (::read(it.get(), buf, sizeof(buf)) > 0) {
    }
    if (!skel_->bss->tracer_task || !skel_->bss->guardian_task)
        throw CaptureError("the BPF task iterator did not find the tracer and its guardian");
}

void Holds::attach_self_holds(const std::function<common::UniqueFd()>& child_start, const std::string& interp_path)
{
    attach_tracepoint(skel_->progs.on_fork_note, skel_->links.on_fork_note, "sched_process_fork");
    attach_tracepoint(skel_->progs.on_exec_stop, skel_->links.on_exec_stop, "sched_process_exec");
    // Every process of the interpreter traps there, once per fork: a child of a traced process stops itself.
    child_start_link_ = child_start();
    if (!child_start_link_)
        throw CaptureError(fmt::format("cannot probe PyOS_AfterFork_Child in {}: {}", interp_path, strerror(errno)));
}

void Holds::release_held(bool attach, bool all)
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
        bool attached = attach && attach_children_;
        bool parents_image = (hold.flags & LOTUS_HOLD_STOPPED) && !(hold.flags & LOTUS_HOLD_AT_EXEC);
        if (attached)
            attach_(tgid, parents_image ? hold.parent_tgid : 0);
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

size_t Holds::let_children_start(int wait_ms, const Poll& poll)
{
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

void Holds::seen(uint32_t type, uint32_t tgid)
{
    if (type == LOTUS_EV_GETPPID || type == LOTUS_EV_EXIT)
        starting_.erase(tgid);
}

void Holds::exited(uint32_t tgid)
{
    lotus_hold hold{};
    int fd = bpf_map__fd(skel_->maps.lotus_held);
    if (bpf_map_lookup_elem(fd, &tgid, &hold) == 0 && (hold.flags & (LOTUS_HOLD_SHARED_MM | LOTUS_HOLD_PENDING)))
        bpf_map_delete_elem(fd, &tgid);
}

void Holds::stop()
{
    child_start_link_.reset();
    release_held(false, true);
    for (size_t r = 0; r < LOTUS_UNHELD_REASONS; r++)
        holds_.unheld_by[r] = skel_->bss->unheld[r];
    holds_.spawned_python = skel_->bss->exec_held;
}

void Holds::end_guardian() { guardian_.reset(); }

} // namespace lotus::capture
