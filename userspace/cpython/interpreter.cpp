#include "cpython/interpreter.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <regex>
#include <optional>
#include <set>
#include <cstring>
#include <cerrno>

#include "cpython/builtin_functions.h"
#include "common/arch.h"
#include "cpython/debug_offsets.h"
#include "elf/elf_file.h"
#include "elf/probe_point.h"
#include "proc/proc_maps.h"
#include "cpython/slot_functions.h"

namespace lotus::cpython {

namespace {

constexpr const char* kEvalSymbol = "_PyEval_EvalFrameDefault";

bool looks_like_libpython(const std::string& path)
{
    auto base = std::filesystem::path(path).filename().string();
    return base.rfind("libpython", 0) == 0 && base.find(".so") != std::string::npos;
}

// Before 3.11 there is no Py_Version: the release is the PY_VERSION string ("3.10.13") that Py_GetVersion
// formats, in .rodata (the linker may have merged it into the end of a longer string, e.g. a build directory
// "Python-3.10.13"). The micro version when every such string agrees, else -1.
int micro_from_rodata(const elf::ElfFile& elf, int major, int minor)
{
    auto sec = elf.section(".rodata");
    if (!sec || sec->second > (64u << 20))
        return -1;
    std::ifstream f(elf.path(), std::ios::binary);
    std::string data(sec->second, '\0');
    if (!f.seekg(static_cast<std::streamoff>(sec->first)) || !f.read(data.data(), static_cast<std::streamsize>(data.size())))
        return -1;
    std::string prefix = fmt::format("{}.{}.", major, minor);
    std::set<int> found;
    for (size_t at = data.find(prefix); at != std::string::npos; at = data.find(prefix, at + 1)) {
        if (at > 0 && (isdigit(static_cast<unsigned char>(data[at - 1])) || data[at - 1] == '.'))
            continue;
        size_t i = at + prefix.size(), digits = i;
        while (i < data.size() && isdigit(static_cast<unsigned char>(data[i])))
            i++;
        if (i == digits || i - digits > 3)
            continue;
        int micro = std::stoi(data.substr(digits, i - digits));
        while (i < data.size() && (isalnum(static_cast<unsigned char>(data[i])) || data[i] == '+')) // a2, rc1, +
            i++;
        if (i < data.size() && data[i] == '\0')
            found.insert(micro);
    }
    return found.size() == 1 ? *found.begin() : -1;
}

// Py_Version (3.11+) is a constant in the file; older versions are named by their file (python3.10,
// libpython3.10.so), the release read from .rodata. Returns nullopt if neither tells.
std::optional<PyVersion> version_of(const elf::ElfFile& elf)
{
    if (auto sym = elf.symbol("Py_Version")) {
        if (auto bytes = elf.read(sym->value, 4)) {
            uint32_t hex = (*bytes)[0] | (*bytes)[1] << 8 | (*bytes)[2] << 16 | uint32_t((*bytes)[3]) << 24;
            return PyVersion{int(hex >> 24 & 0xff), int(hex >> 16 & 0xff), int(hex >> 8 & 0xff)};
        }
    }
    static const std::regex re(R"(python(\d)\.(\d+))");
    std::smatch m;
    std::string base = std::filesystem::path(elf.path()).filename().string();
    if (std::regex_search(base, m, re)) {
        int major = std::stoi(m[1]), minor = std::stoi(m[2]);
        return PyVersion{major, minor, micro_from_rodata(elf, major, minor)};
    }
    return std::nullopt;
}

bool is_python(const elf::ElfFile& elf)
{
    return elf.symbol("Py_Initialize") || elf.symbol(kEvalSymbol);
}

Interpreter describe(const elf::ElfFile& elf, bool shared, const std::string& who)
{
    auto version = version_of(elf);
    if (!version)
        throw TargetError(fmt::format("{}: cannot tell the CPython version of {}", who, elf.path()));
    auto layout = layout_for(*version);
    auto caps = caps_for(*version);
    auto eval = elf.symbol(kEvalSymbol);
    auto runtime = elf.symbol("_PyRuntime");
    if (!layout || !caps) {
        auto bytes = runtime ? elf.read(runtime->value, 16) : std::nullopt;
        throw TargetError(fmt::format("{}: {}", who,
                                      unsupported_version(*version, bytes ? bytes->data() : nullptr,
                                                          bytes ? bytes->size() : 0)));
    }
    if (!eval)
        throw TargetError(fmt::format("{}: CPython {}.{} is not supported (supported: {})", who, version->major,
                                      version->minor, supported_versions()));
    auto off = elf.file_offset(eval->value + elf::cheap_probe_shift(elf, eval->value, eval->size));
    if (!off)
        throw TargetError(fmt::format("{}: {} has no file offset for {}", who, elf.path(), kEvalSymbol));
    Interpreter interp{elf.path(), elf.path(), shared, *version, *caps, *off, *layout, "table", std::nullopt, "", std::nullopt, ""};
    interp.runtime_vaddr = runtime ? runtime->value : 0;
    if (auto fns = find_slot_functions(elf, &interp.slots_missing); fns && runtime && layout->runtime_tstate > 0) {
        SlotProbes sp;
        sp.vaddr = fns->vaddr;
        sp.tstate_vaddr = runtime->value + static_cast<uint64_t>(layout->runtime_tstate);
        bool ok = true;
        for (int k = 1; k < LOTUS_SLOTS_PROBED; k++) {
            sp.vaddr[k] += elf::cheap_probe_shift(elf, sp.vaddr[k], 0); // the probe's address (BPF: IP less it)
            auto o = elf.file_offset(sp.vaddr[k]);
            ok &= o.has_value();
            sp.offset[k] = o.value_or(0);
        }
        if (ok)
            interp.slots = sp;
        else
            interp.slots_missing = "a slot function has no file offset";
    } else if (fns) {
        interp.slots_missing = "no _PyRuntime symbol";
    }
    if (auto os_read = find_os_read(elf, &interp.os_read_missing)) {
        interp.os_read_offset = elf.file_offset(*os_read + elf::cheap_probe_shift(elf, *os_read, 0));
        if (!interp.os_read_offset)
            interp.os_read_missing = "os.read has no file offset";
    }
    // The interpreter's own description of its structures where it has one (the table row supplies the rest, and
    // is the fallback when the description is missing or fails validation).
    if (caps->debug_offsets) {
        auto bytes = runtime ? elf.read(runtime->value, kDebugOffsetsBytes) : std::nullopt;
        std::string why;
        if (bytes) {
            if (auto l = layout_from_debug_offsets(bytes->data(), bytes->size(), *layout, &why)) {
                interp.layout = *l;
                interp.layout_source = "_Py_DebugOffsets";
            }
        }
    }
    return interp;
}

// Why the interpreter of `pid` could not be read when that is a permission problem, naming what grants it.
std::optional<std::string> permission_problem(int pid, const std::string& who,
                                              const std::vector<std::pair<std::string, std::string>>& candidates)
{
    char buf[16];
    struct stat proc{};
    bool denied = readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof(buf)) < 0 && errno == EACCES;
    struct stat st{};
    denied |= stat(fmt::format("/proc/{}/root/", pid).c_str(), &st) != 0 && errno == EACCES;
    if (denied) {
        std::string owner = stat(fmt::format("/proc/{}", pid).c_str(), &proc) == 0 ? fmt::format("uid {}", proc.st_uid)
                                                                                  : "another user";
        return fmt::format("{} ({}) belongs to {} and lotus-bpf runs as uid {}: permission denied reading its "
                           "executable and memory; that needs CAP_SYS_PTRACE (besides CAP_BPF and CAP_PERFMON), "
                           "root, or running as its user",
                           who, proc::read_comm(pid), owner, geteuid());
    }
    for (const auto& [path, local] : candidates) {
        if (!local.empty())
            continue;
        for (const std::string& p : {fmt::format("/proc/{}/root{}", pid, path), path})
            if (stat(p.c_str(), &st) != 0 && errno == EACCES)
                return fmt::format("{} ({}): permission denied reading its interpreter {}; that needs read access to "
                                   "it and its directories, or CAP_DAC_READ_SEARCH",
                                   who, proc::read_comm(pid), path);
    }
    return std::nullopt;
}

std::string exe_of(int pid)
{
    char buf[4096];
    ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Where a process's interpreter may be: its executable first (static interpreters), then any libpython it
// mapped; each as (path as the process names it, path we open: the very file it runs, whether it lives under a
// chroot, another mount namespace, or ours).
std::vector<std::pair<std::string, std::string>> interpreter_candidates(int pid, const std::string& exe,
                                                                        const std::vector<proc::Mapping>& maps)
{
    std::vector<std::pair<std::string, std::string>> candidates;
    if (!exe.empty())
        candidates.emplace_back(exe, proc::openable_exe(pid, exe));
    std::set<std::string> seen;
    for (const auto& m : maps)
        if (!m.path.empty() && m.path[0] == '/' && looks_like_libpython(m.path) && seen.insert(m.path).second)
            candidates.emplace_back(m.path, proc::openable_path(pid, m.path, m.inode, m.dev_major, m.dev_minor));
    return candidates;
}

std::unique_ptr<elf::ElfFile> open_elf(const std::string& path)
{
    try {
        return std::make_unique<elf::ElfFile>(path);
    } catch (const std::exception&) {
        return nullptr;
    }
}

} // namespace

Interpreter find_interpreter(int pid)
{
    std::string who = fmt::format("PID {}", pid);
    if (!proc::process_exists(pid))
        throw TargetError(fmt::format("no such process: {}", pid));
    std::vector<proc::Mapping> maps;
    try {
        maps = proc::read_maps(pid);
    } catch (const std::exception&) {
        throw TargetError(fmt::format("{}: cannot read /proc/{}/maps: {}", who, pid,
                                      errno == EACCES || errno == EPERM
                                          ? "permission denied; another user's process needs CAP_SYS_PTRACE or root"
                                          : strerror(errno)));
    }
    std::string exe = exe_of(pid);
    auto candidates = interpreter_candidates(pid, exe, maps);
    for (const auto& [path, local] : candidates) {
        auto elf = local.empty() ? nullptr : open_elf(local);
        if (elf && is_python(*elf)) {
            auto interp = describe(*elf, path != exe, who);
            interp.target_path = path;
            return interp;
        }
    }
    if (auto why = permission_problem(pid, who, candidates))
        throw TargetError(*why);
    throw TargetError(fmt::format("{} ({}) is not a CPython process", who, proc::read_comm(pid)));
}

Interpreter find_interpreter_in_executable(const std::string& exe_path, const std::string& ld_library_path)
{
    std::unique_ptr<elf::ElfFile> exe;
    try {
        exe = std::make_unique<elf::ElfFile>(exe_path);
    } catch (const std::exception& e) {
        throw TargetError(fmt::format("{}: {}", exe_path, e.what()));
    }
    if (is_python(*exe))
        return describe(*exe, false, exe_path);
    // A shared libpython: search where the dynamic loader would (RUNPATH with $ORIGIN, LD_LIBRARY_PATH,
    // the system directories).
    std::vector<std::string> dirs;
    std::string origin = std::filesystem::path(exe_path).parent_path().string();
    for (auto d : exe->runpath()) {
        if (auto p = d.find("$ORIGIN"); p != std::string::npos)
            d.replace(p, 7, origin);
        dirs.push_back(d);
    }
    std::stringstream ss(ld_library_path);
    for (std::string d; std::getline(ss, d, ':');)
        if (!d.empty())
            dirs.push_back(d);
    for (const char* d : common::kMultiarchLibDirs)
        dirs.push_back(d);
    for (const char* d : {"/usr/local/lib", "/lib", "/usr/lib"})
        dirs.push_back(d);
    for (const auto& lib : exe->needed()) {
        if (!looks_like_libpython(lib))
            continue;
        for (const auto& d : dirs) {
            std::string p = d + "/" + lib;
            if (access(p.c_str(), R_OK) != 0)
                continue;
            elf::ElfFile elf(std::filesystem::canonical(p).string());
            if (is_python(elf))
                return describe(elf, true, exe_path);
        }
    }
    throw TargetError(fmt::format("{} is not a CPython interpreter", exe_path));
}

namespace {

// cpython_of, from maps already read.
std::optional<std::string> cpython_in(int pid, const std::vector<proc::Mapping>& maps)
{
    std::string exe = exe_of(pid);
    std::unique_ptr<elf::ElfFile> exe_elf;
    for (const auto& [path, local] : interpreter_candidates(pid, exe, maps)) {
        auto elf = local.empty() ? nullptr : open_elf(local);
        if (elf && is_python(*elf))
            return path;
        if (path == exe && !exe_elf)
            exe_elf = std::move(elf);
    }
    // An executable linked to a libpython that its dynamic loader has not mapped yet is still to be told.
    if (exe_elf)
        for (const auto& lib : exe_elf->needed())
            if (looks_like_libpython(lib))
                return std::nullopt;
    return std::string();
}

std::optional<std::vector<proc::Mapping>> maps_of(int pid)
{
    try {
        return proc::read_maps(pid);
    } catch (const std::exception&) {
        return std::nullopt; // gone
    }
}

} // namespace

std::optional<std::string> cpython_of(int pid)
{
    auto maps = maps_of(pid);
    return maps ? cpython_in(pid, *maps) : std::string();
}

std::optional<std::string> other_interpreter(int pid, const Interpreter& probed)
{
    auto maps = maps_of(pid);
    if (!maps)
        return std::string();
    struct stat st{};
    bool known = stat(probed.object_path.c_str(), &st) == 0;
    for (const auto& m : *maps)
        if (m.path == probed.target_path ||
            (known && m.inode == st.st_ino && m.dev_major == major(st.st_dev) && m.dev_minor == minor(st.st_dev)))
            return std::string();
    return cpython_in(pid, *maps);
}

} // namespace lotus::cpython
