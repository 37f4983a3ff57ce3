#include "elf/libc_wrappers.h"

#include <unistd.h>

#include <exception>
#include <iterator>

#include "common/arch.h"
#include "common/path.h"
#include "elf/elf_file.h"
#include "lotus_abi.h"
#include "elf/probe_point.h"
#include "proc/proc_maps.h"

namespace lotus::elf {

namespace {

bool is_libc_name(const std::string& base)
{
    return base.starts_with("libc.so") || (base.starts_with("libc-") && base.ends_with(".so")) ||
           base.starts_with("ld-musl-");
}

} // namespace

std::optional<LibcMapping> mapped_libc(int pid)
{
    std::vector<proc::Mapping> maps;
    try {
        maps = proc::read_maps(pid);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    for (const auto& m : maps) {
        if (m.path.empty() || m.path[0] != '/' || m.perms.find('x') == std::string::npos ||
            !is_libc_name(common::base_name(m.path)))
            continue;
        std::string local = proc::openable_path(pid, m.path, m.inode, m.dev_major, m.dev_minor);
        if (!local.empty())
            return LibcMapping{local, m.inode, m.dev_major, m.dev_minor};
    }
    return std::nullopt;
}

std::optional<LibcWrappers> libc_wrappers(const std::string& path)
{
    try {
        ElfFile elf(path);
        // the first name each has (glibc: open64 and open are one function, openat64 and openat too)
        auto offset = [&](const char* name, const char* alias) -> std::optional<uint64_t> {
            for (const char* n : {name, alias})
                if (n)
                    if (auto sym = elf.symbol(n); sym && sym->value)
                        if (auto off = elf.file_offset(sym->value + cheap_probe_shift(elf, sym->value, sym->size)))
                            return off;
            return std::nullopt;
        };
        struct Call {
            const char *name, *alias;
            uint64_t cookie;
        };
        constexpr Call calls[] = {{"read", nullptr, LOTUS_LIBC_READ},
                                  {"write", nullptr, LOTUS_LIBC_WRITE},
                                  {"getppid", nullptr, LOTUS_LIBC_GETPPID},
                                  {"open64", "open", LOTUS_LIBC_OPEN},
                                  {"openat64", "openat", LOTUS_LIBC_OPENAT}};
        LibcWrappers w;
        for (const auto& c : calls) {
            auto off = offset(c.name, c.alias);
            if (!off)
                return std::nullopt;
            w.offsets.push_back(*off);
            w.cookies.push_back(c.cookie);
        }
        // glibc's own opens that do not go through open64 (opendir, fopen "e"): where it exports them
        if (auto off = offset("__open64_nocancel", "__open_nocancel")) {
            w.offsets.push_back(*off);
            w.cookies.push_back(LOTUS_LIBC_OPEN);
        }
        w.dlopen = offset("dlopen", nullptr);
        return w;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

std::optional<std::string> linked_libc(const std::string& path)
{
    try {
        // A path under /proc/PID/root names files of that process's root: its libc is under the same root.
        std::string root;
        if (path.starts_with("/proc/"))
            if (auto at = path.find("/root/"); at != std::string::npos)
                root = path.substr(0, at + 5);
        for (const auto& lib : ElfFile(path).needed()) {
            if (!is_libc_name(lib))
                continue;
            std::vector<std::string> dirs(std::begin(common::kMultiarchLibDirs), std::end(common::kMultiarchLibDirs));
            for (const char* d : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"})
                dirs.emplace_back(d);
            for (const auto& d : dirs)
                if (std::string p = root + d + "/" + lib; access(p.c_str(), R_OK) == 0)
                    return p;
        }
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

bool links_libc(const std::string& path)
{
    try {
        for (const auto& lib : ElfFile(path).needed())
            if (is_libc_name(lib))
                return true;
    } catch (const std::exception&) {
    }
    return false;
}

} // namespace lotus::elf
