// Probe: the Python probes (type slots or the evaluator, per process or system-wide), the object calls' own
// link (--trainer-calls), and the opcode handlers' probes of inlined calls (--all-calls on 3.11).
#include "probe.h"

#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "common/clock.h"
#include "lotus_abi.h"
#include "lotus.skel.h"
#include "probe_internal.h"

namespace lotus::capture {

void Probe::adopt_threads()
{
    // A task iterator's program runs for every task of the machine as the iterator is read.
    Link link(bpf_program__attach_iter(skel_->progs.adopt_threads, nullptr));
    common::UniqueFd it(link ? bpf_iter_create(bpf_link__fd(link.get())) : -1);
    if (!it)
        throw CaptureError(fmt::format("cannot run the BPF task iterator that finds the traced threads: {}",
                                       strerror(errno)));
    char buf[256];
    while (::read(it.get(), buf, sizeof(buf)) > 0) {
    }
}

void Probe::attach_python()
{
    adopt_threads();
    const auto& offsets = py_offsets_;
    const auto& cookies = py_cookies_;
    if (hold_) {
        pin(interp_.object_path); // for the links of later children; now, while the process it was found in lives
        // The children held so far (new processes), then every other process traced so far; later children
        // get theirs while held.
        holds_->attach_children();
        holds_->release_held(true, true);
        for (uint32_t tgid : tgid_keys(bpf_map__fd(skel_->maps.lotus_traced)))
            if (!process_links_.has(tgid))
                attach_python_to(tgid);
        if (!attach_error_.empty())
            throw CaptureError(attach_error_);
        return;
    }
    if (session_type_ >= 0) {
        // One probe for entry and return: the kernel hooks the return only of calls whose entry asks for it.
        session_link_ = multi_link(slots_ ? skel_->progs.py_slot : skel_->progs.py_call, session_type_,
                                   interp_.object_path, offsets, cookies);
        if (!session_link_)
            throw CaptureError(fmt::format("cannot attach a uprobe session to {}: {}", interp_.object_path,
                                           strerror(errno)));
        return;
    }
    bpf_program* entry = slots_ ? skel_->progs.py_slot_entry : skel_->progs.py_entry;
    // Without uprobe_multi links (kernels before 6.6), one perf-event probe pair per function.
    bool ok = multi_type_ >= 0 ? attach_pair(entry, skel_->progs.py_return, interp_.object_path, offsets, cookies)
                               : true;
    for (size_t i = 0; multi_type_ < 0 && ok && i < offsets.size(); i++)
        ok = attach_pair(entry, skel_->progs.py_return, interp_.object_path, {offsets[i]}, {cookies[i]});
    if (!ok)
        throw CaptureError(fmt::format("cannot attach a uprobe and a uretprobe to {}: {}", interp_.object_path,
                                       strerror(errno)));
}

void Probe::attach_python_to(uint32_t tgid, uint32_t forked_from)
{
    std::vector<common::UniqueFd> fds;
    // A set of this process's links, or false with the refusal noted (ESRCH: it is gone already, nothing to say);
    // the links made before it close with fds.
    auto made = [&](std::vector<common::UniqueFd> more, const char* what, const std::string& path) {
        if (more.empty() || !more.back()) {
            if (errno != ESRCH && attach_error_.empty())
                attach_error_ = fmt::format("cannot attach the {} probes of {} to process {}: {}", what, path, tgid,
                                            strerror(errno));
            return false;
        }
        for (auto& fd : more)
            fds.push_back(std::move(fd));
        return true;
    };
    std::vector<common::UniqueFd> python;
    std::string interp = pin(interp_.object_path);
    int call_link = -1;
    if (calls_apart_) {
        // The object calls' probe in a link of its own, which detach_object_calls can take away.
        std::vector<uint64_t> offsets, cookies;
        for (size_t i = 0; i < py_offsets_.size(); i++)
            if (py_cookies_[i] != LOTUS_SLOT_CALL) {
                offsets.push_back(py_offsets_[i]);
                cookies.push_back(py_cookies_[i]);
            }
        python.push_back(multi_link(skel_->progs.py_slot, session_type_, interp, offsets, cookies, false, tgid));
        if (python.back()) {
            python.push_back(object_call_link(tgid));
            call_link = python.back().get();
        }
    } else if (session_type_ >= 0)
        python.push_back(multi_link(slots_ ? skel_->progs.py_slot : skel_->progs.py_call, session_type_, interp,
                                    py_offsets_, py_cookies_, false, tgid));
    else
        python = multi_pair(slots_ ? skel_->progs.py_slot_entry : skel_->progs.py_entry, skel_->progs.py_return,
                            interp, py_offsets_, py_cookies_, tgid);
    if (!made(std::move(python), "Python", interp_.object_path))
        return;
    for (const auto& lib : per_process_natives_)
        if (!made(native_multi(pin(lib.path), lib.offsets, lib.cookies, tgid), "native", lib.path))
            return;
    if (!inline_resume_.empty() && !made(inline_links(tgid), "opcode-handler", interp_.object_path))
        return;
    if (libc_links_) {
        libc_links_->new_process(tgid); // (an earlier process's files, under the same pid)
        if (!libc_links_->attach_to(tgid, fds, forked_from))
            libc_links_->pend(tgid, common::monotonic_ns()); // stopped at its exec: no libc mapped yet
    }
    process_links_.add(tgid, std::move(fds));
    if (call_link >= 0)
        call_links_[tgid] = call_link;
}

common::UniqueFd Probe::object_call_link(uint32_t tgid)
{
    for (size_t i = 0; i < py_offsets_.size(); i++)
        if (py_cookies_[i] == LOTUS_SLOT_CALL)
            return multi_link(skel_->progs.py_slot, session_type_, pin(interp_.object_path), {py_offsets_[i]},
                              {LOTUS_SLOT_CALL}, false, tgid);
    errno = ENOENT;
    return {};
}

common::UniqueFd Probe::detach_object_calls(uint32_t tgid)
{
    auto it = call_links_.find(tgid);
    if (it == call_links_.end())
        return {};
    common::UniqueFd fd = process_links_.take(tgid, it->second);
    call_links_.erase(it);
    return fd;
}

bool Probe::attach_object_calls(uint32_t tgid)
{
    if (!calls_apart_ || call_links_.count(tgid) || !process_links_.has(tgid))
        return false;
    common::UniqueFd fd = object_call_link(tgid);
    if (!fd)
        return false;
    call_links_[tgid] = fd.get();
    std::vector<common::UniqueFd> v;
    v.push_back(std::move(fd));
    process_links_.append(tgid, std::move(v));
    return true;
}

std::vector<common::UniqueFd> Probe::inline_links(uint32_t tgid)
{
    std::string interp = pin(interp_.object_path);
    std::vector<common::UniqueFd> fds = probe_links(skel_->progs.py_resume, interp, inline_resume_, {}, false, tgid);
    if (fds.empty())
        return fds;
    std::vector<common::UniqueFd> rets = probe_links(skel_->progs.py_retval, interp, {inline_return_}, {}, false, tgid);
    if (rets.empty()) {
        int err = errno;
        fds.clear();
        errno = err;
        return fds;
    }
    fds.push_back(std::move(rets[0]));
    return fds;
}

void Probe::attach_inline_calls(const std::vector<uint64_t>& resume_offsets, uint64_t return_offset)
{
    auto refused = [&](uint64_t off) {
        return CaptureError(fmt::format("cannot probe the interpreter's opcode handler at {:#x} of {}: {}", off,
                                        interp_.object_path, strerror(errno)));
    };
    if (hold_) {
        // Per traced process, like the Python probes: another process of this interpreter never traps at its
        // opcodes. Those traced now (launch mode: the command, not yet running); held children in attach_python_to.
        inline_resume_ = resume_offsets;
        inline_return_ = return_offset;
        for (uint32_t tgid : process_links_.tgids()) {
            auto fds = inline_links(tgid);
            if (fds.empty()) {
                if (errno == ESRCH)
                    continue;
                throw refused(resume_offsets.empty() ? return_offset : resume_offsets[0]);
            }
            process_links_.append(tgid, std::move(fds));
        }
        return;
    }
    if (multi_type_ >= 0) {
        for (auto [prog, offsets] : {std::pair{skel_->progs.py_resume, resume_offsets},
                                     std::pair{skel_->progs.py_retval, std::vector<uint64_t>{return_offset}}}) {
            auto fd = multi_link(prog, multi_type_, interp_.object_path, offsets);
            if (!fd)
                throw refused(offsets[0]);
            multi_links_.push_back(std::move(fd));
        }
        return;
    }
    auto attach = [&](bpf_program* prog, uint64_t off) {
        LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = false);
        Link l(bpf_program__attach_uprobe_opts(prog, -1, interp_.object_path.c_str(), off, &opts));
        if (!l)
            throw refused(off);
        links_.push_back(std::move(l));
    };
    for (uint64_t off : resume_offsets)
        attach(skel_->progs.py_resume, off);
    attach(skel_->progs.py_retval, return_offset);
}

} // namespace lotus::capture
