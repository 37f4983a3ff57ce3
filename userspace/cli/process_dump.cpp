#include "process_dump.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include <cstdio>
#include <fmt/format.h>
#include <map>
#include <set>

#include "common/printable.h"
#include "common/read_file.h"
#include "elf/cfi_unwinder.h"
#include "elf/elf_file.h"
#include "elf/symbolizer.h"
#include "proc/proc_maps.h"
#include "proc/process_tree.h"

namespace lotus::cli {

namespace {

constexpr size_t kStackCopy = 64 << 10, kNativeFrames = 32;

// Names of the system calls a blocked worker or loop is usually in; others by number.
std::string syscall_name(long nr)
{
    static const std::map<long, const char*> names = {
        {SYS_read, "read"}, {SYS_write, "write"}, {SYS_poll, "poll"}, {SYS_select, "select"},
        {SYS_pselect6, "pselect6"}, {SYS_ppoll, "ppoll"}, {SYS_futex, "futex"}, {SYS_nanosleep, "nanosleep"},
        {SYS_clock_nanosleep, "clock_nanosleep"}, {SYS_epoll_wait, "epoll_wait"}, {SYS_epoll_pwait, "epoll_pwait"},
        {SYS_wait4, "wait4"}, {SYS_waitid, "waitid"}, {SYS_recvfrom, "recvfrom"}, {SYS_recvmsg, "recvmsg"},
        {SYS_sendto, "sendto"}, {SYS_sendmsg, "sendmsg"}, {SYS_accept, "accept"}, {SYS_accept4, "accept4"},
        {SYS_connect, "connect"}, {SYS_openat, "openat"}, {SYS_pread64, "pread64"}, {SYS_pause, "pause"},
        {SYS_rt_sigtimedwait, "rt_sigtimedwait"}, {SYS_rt_sigsuspend, "rt_sigsuspend"}, {SYS_sched_yield, "sched_yield"},
    };
    auto it = names.find(nr);
    return it != names.end() ? it->second : fmt::format("syscall {}", nr);
}

// A thread's state letter and its comm, from /proc/PID/task/TID/stat.
std::pair<char, std::string> thread_state(int pid, uint32_t tid)
{
    auto text = common::read_file(fmt::format("/proc/{}/task/{}/stat", pid, tid));
    if (!text)
        return {'?', ""};
    auto open = text->find('('), close = text->rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 >= text->size())
        return {'?', ""};
    return {(*text)[close + 2], text->substr(open + 1, close - open - 1)};
}

std::vector<uint32_t> tasks(int pid)
{
    std::vector<uint32_t> tids;
    DIR* d = opendir(fmt::format("/proc/{}/task", pid).c_str());
    if (!d)
        return tids;
    while (auto* e = readdir(d))
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
            tids.push_back(static_cast<uint32_t>(std::stoul(e->d_name)));
    closedir(d);
    std::sort(tids.begin(), tids.end());
    return tids;
}

// _PyRuntime's address in pid: its file address moved by where pid mapped the interpreter's file.
std::optional<uint64_t> runtime_address(int pid, const cpython::Interpreter& interp)
{
    if (!interp.runtime_vaddr)
        return std::nullopt;
    struct stat st{};
    bool known = stat(interp.object_path.c_str(), &st) == 0;
    std::optional<proc::Mapping> first;
    for (const auto& m : proc::read_maps(pid))
        if ((m.path == interp.target_path ||
             (known && m.inode == st.st_ino && m.dev_major == major(st.st_dev) && m.dev_minor == minor(st.st_dev))) &&
            (!first || m.offset < first->offset))
            first = m;
    if (!first)
        return std::nullopt;
    elf::ElfFile elf(interp.object_path);
    auto vaddr = elf.vaddr_of(first->offset);
    if (!vaddr)
        return std::nullopt;
    return interp.runtime_vaddr + (first->start - *vaddr);
}

// The native stack of a thread blocked in a system call, from the sp and pc the kernel saved at its entry.
void native_stack(int pid, ThreadDump& t, const cpython::Memory& mem, elf::Symbolizer& syms, elf::CfiUnwinder& cfi)
{
    auto text = common::read_file(fmt::format("/proc/{}/task/{}/syscall", pid, t.tid));
    if (!text) {
        t.native_missing = "its /proc syscall file could not be read";
        return;
    }
    if (text->rfind("running", 0) == 0) {
        t.native_missing = "it is running: its native stack cannot be read without stopping it";
        return;
    }
    long nr = 0;
    unsigned long args[6], sp = 0, pc = 0;
    if (sscanf(text->c_str(), "%ld %lx %lx %lx %lx %lx %lx %lx %lx", &nr, &args[0], &args[1], &args[2], &args[3],
               &args[4], &args[5], &sp, &pc) == 9) {
        t.syscall = syscall_name(nr);
    } else if (sscanf(text->c_str(), "%ld %lx %lx", &nr, &sp, &pc) != 3) {
        t.native_missing = "its /proc syscall file could not be parsed";
        return;
    }
    if (nr < 0) {
        t.native_missing = "it is blocked outside a system call (a page fault, or stopped)";
        return;
    }
    // As much of its stack from sp as is mapped, up to kStackCopy, page by page.
    std::vector<uint8_t> copy(kStackCopy);
    size_t got = 0;
    while (got < copy.size()) {
        size_t n = std::min<size_t>(copy.size() - got, 4096 - (sp + got) % 4096);
        if (!mem.read(sp + got, copy.data() + got, n))
            break;
        got += n;
    }
    auto name = [&](uint64_t ip) {
        auto f = syms.resolve(static_cast<uint32_t>(pid), ip);
        return fmt::format("{} ({})", f.function.empty() ? fmt::format("{:#x}", ip) : f.function,
                           f.library.empty() ? "?" : f.library);
    };
    t.native.push_back(name(pc));
    elf::StackCopy stack{pc, sp, 0, copy.data(), got};
    cfi.walk(stack, kNativeFrames, [&](uint64_t ip) { return syms.place(static_cast<uint32_t>(pid), ip); },
             [&](uint64_t ra) {
                 t.native.push_back(name(ra - 1)); // the call instruction's function (ra may begin the next one)
                 return true;
             });
}

} // namespace

ProcessDump dump_process(int pid, bool native)
{
    ProcessDump d;
    d.pid = pid;
    d.parent = proc::parent_pid(pid).value_or(0);
    d.comm = proc::read_comm(pid);
    d.command_line = proc::command_line(pid);
    cpython::Interpreter interp;
    try {
        interp = cpython::find_interpreter(pid);
    } catch (const std::exception& e) {
        d.error = e.what();
        return d;
    }
    d.python = fmt::format("{} ({})", interp.version.str(), interp.target_path);
    auto stacks_layout = cpython::stack_layout_for(interp.version);
    std::optional<uint64_t> runtime;
    try {
        runtime = runtime_address(pid, interp);
    } catch (const std::exception& e) {
        d.error = fmt::format("its memory map could not be read: {}", e.what());
        return d;
    }
    if (!stacks_layout || !runtime) {
        d.error = "its interpreter's _PyRuntime could not be found";
        return d;
    }
    cpython::ProcessMemory mem(pid);
    std::string why;
    auto stacks = cpython::read_python_stacks(mem, *runtime, interp.layout, *stacks_layout, &why);
    if (!stacks) {
        d.error = why;
        return d;
    }
    proc::ProcessTree tree;
    elf::Symbolizer syms(tree);
    elf::CfiUnwinder cfi;
    std::set<uint32_t> python_tids;
    for (auto& st : *stacks) {
        if (!st.tid) {
            d.unmatched.push_back(std::move(st));
            continue;
        }
        ThreadDump t;
        t.tid = *st.tid;
        std::tie(t.state, t.name) = thread_state(pid, t.tid);
        python_tids.insert(t.tid);
        t.python = std::move(st);
        if (native && t.state != 'R')
            native_stack(pid, t, mem, syms, cfi);
        else if (native)
            t.native_missing = "it is running: its native stack cannot be read without stopping it";
        d.threads.push_back(std::move(t));
    }
    for (uint32_t tid : tasks(pid))
        if (!python_tids.count(tid))
            d.others.push_back(thread_state(pid, tid).second);
    return d;
}

std::string format_python_stack(const cpython::PyThreadStack& st, const std::string& indent)
{
    std::string out;
    for (const auto& f : st.frames) {
        std::string args;
        for (const auto& [name, v] : f.int_args)
            args += fmt::format("{}{}={}", args.empty() ? " " : ", ", common::printable(name), v);
        out += fmt::format("{}{} ({}:{}){}\n", indent, common::printable(f.function), common::printable(f.file),
                           f.line ? std::to_string(*f.line) : "?", args);
    }
    if (st.frames.empty() && st.cut.empty())
        out += indent + "(no Python frames: idle, or in native code)\n";
    if (!st.cut.empty())
        out += fmt::format("{}(stack cut: {})\n", indent, st.cut);
    return out;
}

std::string format_dump(const ProcessDump& d)
{
    std::string out = fmt::format("Process {} ({}), parent {}: {}\n", d.pid, common::printable(d.comm), d.parent,
                                  common::printable(d.command_line));
    if (!d.error.empty())
        return out + fmt::format("  cannot read its stacks: {}\n", common::printable(d.error));
    out += fmt::format("Python {}\n", common::printable(d.python));
    static const std::map<char, const char*> states = {{'R', "running"}, {'S', "sleeping"}, {'D', "in disk wait"},
                                                       {'T', "stopped"}, {'t', "stopped (traced)"}, {'Z', "zombie"}};
    for (const auto& t : d.threads) {
        auto s = states.find(t.state);
        out += fmt::format("\nThread {} ({}): {}{}\n", t.tid, common::printable(t.name),
                           s != states.end() ? s->second : "state unknown",
                           t.syscall.empty() ? "" : fmt::format(", in {}", t.syscall));
        out += format_python_stack(*t.python, "    ");
        if (!t.native.empty()) {
            out += "  native:\n";
            for (const auto& f : t.native)
                out += fmt::format("    {}\n", common::printable(f));
        } else if (!t.native_missing.empty()) {
            out += fmt::format("  native: not read ({})\n", t.native_missing);
        }
    }
    for (const auto& st : d.unmatched) {
        out += fmt::format("\nThread {:#x} (pthread id; its thread id is not kept by this Python):\n", st.thread_id);
        out += format_python_stack(st, "    ");
    }
    if (!d.others.empty()) {
        std::map<std::string, int> count;
        for (const auto& n : d.others)
            count[n]++;
        std::string names;
        for (const auto& [n, k] : count)
            names += fmt::format("{}{}{}", names.empty() ? "" : ", ", common::printable(n),
                                 k > 1 ? fmt::format(" x{}", k) : "");
        out += fmt::format("\n{} other thread(s) without Python state: {}\n", d.others.size(), names);
    }
    return out;
}

} // namespace lotus::cli
