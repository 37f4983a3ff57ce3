// /proc/PID/maps and the process tree, read-only.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace lotus::proc {

struct Mapping {
    uint64_t start = 0, end = 0, offset = 0;
    uint64_t inode = 0;
    uint32_t dev_major = 0, dev_minor = 0;
    std::string perms;
    std::string path; // empty for anonymous mappings; as the kernel names it to us (see openable_path)
};

std::vector<Mapping> parse_maps(const std::string& text);
// Throws std::runtime_error when the file cannot be read.
std::vector<Mapping> read_maps(int pid);
// The file mapping covering addr in pid, asked of the kernel alone (PROCMAP_QUERY, Linux 6.11+): one ioctl, not
// the whole maps text (a torch process's is ~1,800 lines, ~1 ms to make and as long to parse). `supported` is false
// where the kernel has no such ioctl; `found` is empty where no file is mapped there. Throws std::runtime_error
// when the process cannot be read.
struct MappingQuery {
    bool supported = false;
    std::optional<Mapping> found;
};
MappingQuery query_file_mapping(int pid, uint64_t addr);
// pid's executable mappings of files, asked of the kernel one at a time (the PROCMAP_QUERY ioctl, Linux 6.11+)
// rather than as the whole maps text: a path only for those `known` does not know (the others' is left empty).
// nullopt where the kernel has no such ioctl; throws std::runtime_error when the process cannot be read.
std::optional<std::vector<Mapping>> exec_file_maps(int pid, const std::function<bool(const Mapping&)>& known);

// A path we can open for the file (inode on dev) that pid maps or runs at `path`: the kernel names it as our
// root reaches it (a chroot: the path is ours as it is) or, when our root does not reach it (another mount
// namespace: a container), as the process's root does (then under /proc/PID/root). The candidate that is that
// very file; empty when neither is.
std::string openable_path(int pid, const std::string& path, uint64_t inode, uint32_t dev_major, uint32_t dev_minor);
// The file a mapping of pid's maps, open: through /proc/PID/map_files (the mapping's very file, whatever mount
// namespace or overlay it is in), else the first of openable_path's candidates that is, once open, that inode on
// that device. Invalid when none is (the process is gone and the path names another file, or none).
common::UniqueFd open_mapped(int pid, const Mapping& map);
// The same for the process's executable.
std::string openable_exe(int pid, const std::string& path);

bool process_exists(int pid);
// A pidfd of the process (Linux 5.3+): readable once it has exited (a zombie too). Invalid where there is none.
common::UniqueFd pidfd_of(int pid);
std::optional<int> parent_pid(int pid);
// Whether pid, or one of its ancestors (read from /proc, up to init), is one `root` says yes to.
bool descends_from(int pid, const std::function<bool(int)>& root);
// Every live descendant of pid (children, grandchildren, ...), from /proc/*/stat.
std::vector<int> descendants(int pid);
// How many CPUs the process may run on (its affinity mask: a cpuset, taskset), or nullopt.
std::optional<unsigned> allowed_cpus(int pid);
std::string read_comm(int pid);
// Its command line, the arguments joined by spaces ("" when it is gone or has none).
std::string command_line(int pid);
// An integer variable of the environment the process started with (/proc/PID/environ), if set.
std::optional<int> env_int(int pid, const std::string& name);

} // namespace lotus::proc
