#include "python_links.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "lotus_abi.h"
#include "lotus.skel.h"

namespace lotus::capture {

void PythonLinks::attach_everywhere()
{
    const auto& offsets = p_.offsets;
    const auto& cookies = p_.cookies;
    const std::string& interp = p_.interp_path;
    if (p_.session_type >= 0) {
        // One probe for entry and return: the kernel hooks the return only of calls whose entry asks for it.
        session_link_ = UprobeLinks::multi_link(p_.slots ? skel_->progs.py_slot : skel_->progs.py_call,
                                                p_.session_type, interp, offsets, cookies);
        if (!session_link_)
            throw CaptureError(fmt::format("cannot attach a uprobe session to {}: {}", interp, strerror(errno)));
        return;
    }
    bpf_program* entry = p_.slots ? skel_->progs.py_slot_entry : skel_->progs.py_entry;
    // Without uprobe_multi links (kernels before 6.6), one perf-event probe pair per function.
    bool multi = uprobes_.multi_type() >= 0;
    bool ok = multi ? attach_pair(entry, skel_->progs.py_return, offsets, cookies) : true;
    for (size_t i = 0; !multi && ok && i < offsets.size(); i++)
        ok = attach_pair(entry, skel_->progs.py_return, {offsets[i]}, {cookies[i]});
    if (!ok)
        throw CaptureError(fmt::format("cannot attach a uprobe and a uretprobe to {}: {}", interp, strerror(errno)));
}

std::vector<common::UniqueFd> PythonLinks::process_links(uint32_t tgid, int& call_link)
{
    std::vector<common::UniqueFd> python;
    std::string interp = uprobes_.pin(p_.interp_path);
    call_link = -1;
    if (p_.calls_apart) {
        // The object calls' probe in a link of its own, which detach_object_calls can take away.
        std::vector<uint64_t> offsets, cookies;
        for (size_t i = 0; i < p_.offsets.size(); i++)
            if (p_.cookies[i] != LOTUS_SLOT_CALL) {
                offsets.push_back(p_.offsets[i]);
                cookies.push_back(p_.cookies[i]);
            }
        python.push_back(
            UprobeLinks::multi_link(skel_->progs.py_slot, p_.session_type, interp, offsets, cookies, false, tgid));
        if (python.back()) {
            python.push_back(object_call_link(tgid));
            call_link = python.back().get();
        }
    } else if (p_.session_type >= 0)
        python.push_back(UprobeLinks::multi_link(p_.slots ? skel_->progs.py_slot : skel_->progs.py_call,
                                                 p_.session_type, interp, p_.offsets, p_.cookies, false, tgid));
    else
        python = uprobes_.multi_pair(p_.slots ? skel_->progs.py_slot_entry : skel_->progs.py_entry,
                                     skel_->progs.py_return, interp, p_.offsets, p_.cookies, tgid);
    return python;
}

common::UniqueFd PythonLinks::object_call_link(uint32_t tgid)
{
    for (size_t i = 0; i < p_.offsets.size(); i++)
        if (p_.cookies[i] == LOTUS_SLOT_CALL)
            return UprobeLinks::multi_link(skel_->progs.py_slot, p_.session_type, uprobes_.pin(p_.interp_path),
                                           {p_.offsets[i]}, {LOTUS_SLOT_CALL}, false, tgid);
    errno = ENOENT;
    return {};
}

common::UniqueFd PythonLinks::detach_object_calls(uint32_t tgid)
{
    auto it = call_links_.find(tgid);
    if (it == call_links_.end())
        return {};
    common::UniqueFd fd = processes_.take(tgid, it->second);
    call_links_.erase(it);
    return fd;
}

bool PythonLinks::attach_object_calls(uint32_t tgid)
{
    if (!p_.calls_apart || call_links_.count(tgid) || !processes_.has(tgid))
        return false;
    common::UniqueFd fd = object_call_link(tgid);
    if (!fd)
        return false;
    call_links_[tgid] = fd.get();
    std::vector<common::UniqueFd> v;
    v.push_back(std::move(fd));
    processes_.append(tgid, std::move(v));
    return true;
}

std::vector<common::UniqueFd> PythonLinks::inline_links(uint32_t tgid)
{
    std::string interp = uprobes_.pin(p_.interp_path);
    std::vector<common::UniqueFd> fds =
        uprobes_.probe_links(skel_->progs.py_resume, interp, inline_resume_, {}, false, tgid);
    if (fds.empty())
        return fds;
    std::vector<common::UniqueFd> rets =
        uprobes_.probe_links(skel_->progs.py_retval, interp, {inline_return_}, {}, false, tgid);
    if (rets.empty()) {
        int err = errno;
        fds.clear();
        errno = err;
        return fds;
    }
    fds.push_back(std::move(rets[0]));
    return fds;
}

void PythonLinks::attach_inline_calls(const std::vector<uint64_t>& resume_offsets, uint64_t return_offset)
{
    auto refused = [&](uint64_t off) {
        return CaptureError(fmt::format("cannot probe the interpreter's opcode handler at {:#x} of {}: {}", off,
                                        p_.interp_path, strerror(errno)));
    };
    if (p_.per_process) {
        // Per traced process, like the Python probes: another process of this interpreter never traps at its
        // opcodes. Those traced now (launch mode: the command, not yet running); held children in Probe::attach_to.
        inline_resume_ = resume_offsets;
        inline_return_ = return_offset;
        for (uint32_t tgid : processes_.tgids()) {
            auto fds = inline_links(tgid);
            if (fds.empty()) {
                if (errno == ESRCH)
                    continue;
                throw refused(resume_offsets.empty() ? return_offset : resume_offsets[0]);
            }
            processes_.append(tgid, std::move(fds));
        }
        return;
    }
    if (uprobes_.multi_type() >= 0) {
        for (auto [prog, offsets] : {std::pair{skel_->progs.py_resume, resume_offsets},
                                     std::pair{skel_->progs.py_retval, std::vector<uint64_t>{return_offset}}}) {
            auto fd = UprobeLinks::multi_link(prog, uprobes_.multi_type(), p_.interp_path, offsets);
            if (!fd)
                throw refused(offsets[0]);
            multi_links_.push_back(std::move(fd));
        }
        return;
    }
    auto attach = [&](bpf_program* prog, uint64_t off) {
        LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = false);
        Link l(bpf_program__attach_uprobe_opts(prog, -1, p_.interp_path.c_str(), off, &opts));
        if (!l)
            throw refused(off);
        links_.push_back(std::move(l));
    };
    for (uint64_t off : resume_offsets)
        attach(skel_->progs.py_resume, off);
    attach(skel_->progs.py_retval, return_offset);
}

bool PythonLinks::attach_pair(bpf_program* entry, bpf_program* ret, const std::vector<uint64_t>& offsets,
                              const std::vector<uint64_t>& cookies)
{
    const std::string& path = p_.interp_path;
    if (uprobes_.multi_type() >= 0) {
        auto fds = uprobes_.multi_pair(entry, ret, path, offsets, cookies);
        for (auto& fd : fds)
            multi_links_.push_back(std::move(fd));
        return !fds.empty();
    }
    if (offsets.size() != 1)
        return false;
    uint64_t cookie = cookies.empty() ? 0 : cookies[0];
    LIBBPF_OPTS(bpf_uprobe_opts, ret_opts, .bpf_cookie = cookie, .retprobe = true);
    Link out(bpf_program__attach_uprobe_opts(ret, -1, path.c_str(), offsets[0], &ret_opts));
    if (!out)
        return false;
    LIBBPF_OPTS(bpf_uprobe_opts, entry_opts, .bpf_cookie = cookie, .retprobe = false);
    Link in(bpf_program__attach_uprobe_opts(entry, -1, path.c_str(), offsets[0], &entry_opts));
    if (!in) {
        int err = errno;
        out.reset();
        errno = err;
        return false;
    }
    links_.push_back(std::move(out));
    links_.push_back(std::move(in));
    return true;
}

void PythonLinks::release(std::vector<common::UniqueFd>& batch)
{
    batch.push_back(std::move(session_link_));
    for (auto& l : multi_links_)
        batch.push_back(std::move(l));
    multi_links_.clear();
}

} // namespace lotus::capture
