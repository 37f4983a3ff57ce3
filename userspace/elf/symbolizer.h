// Native addresses of a process to function names: its /proc/PID/maps, then the mapped file's ELF symbols
// (.dynsym and .symtab), demangled. What a sampled instruction pointer or a probed function is called.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/file_id.h"
#include "common/unique_fd.h"
#include "elf/cfi_unwinder.h"
#include "proc/proc_maps.h"
#include "proc/process_tree.h"

namespace lotus::elf {

// "at::_ops::copy_::call(at::Tensor&, ...)" -> "at::_ops::copy_::call"; C names are returned unchanged.
std::string demangle(const std::string& name, bool with_params = false);

class ElfFile;

// One file's functions, sorted by address (file virtual addresses).
class FunctionTable {
public:
    explicit FunctionTable(const std::string& path); // throws std::runtime_error
    ~FunctionTable();
    // The function whose [start, start + size) holds vaddr, or nullptr.
    const std::string* find(uint64_t vaddr) const;
    // The function at a file offset (what a mapping of the file shows), or nullptr.
    const std::string* find_offset(uint64_t file_offset) const;
    // The same, and the file offsets around it that give the same answer: [*lo, *hi).
    const std::string* find_offset_range(uint64_t file_offset, uint64_t* lo, uint64_t* hi) const;

private:
    // find(), and the addresses around vaddr that give the same answer: [*lo, *hi).
    const std::string* find_range(uint64_t vaddr, uint64_t* lo, uint64_t* hi) const;
    std::unique_ptr<ElfFile> elf_;
    struct Entry {
        uint64_t start, end;
        uint32_t name;
    };
    std::vector<Entry> entries_;
    // Mangled until first found (then demangled in place): demangling every symbol of libtorch_cpu up front
    // was slow (docs/performance.md, "What costs what"). Not thread-safe, like the rest of the symbolizer.
    mutable std::vector<std::string> names_;
    mutable std::vector<bool> demangled_;
};

struct NativeFrame {
    std::string function; // demangled without parameters; empty when unknown
    std::string library;  // basename of the mapped file, "" when the address is in no file mapping
    uint64_t lo = 0, hi = 0; // the process's addresses around the one asked for that resolve the same, [lo, hi)
};

class Symbolizer {
public:
    // tree: the traced processes' parents (capture's one copy), whose maps serve a process that is gone.
    explicit Symbolizer(const proc::ProcessTree& tree) : tree_(tree) {}
    // A process's maps are read on first use. An address outside them is asked of the kernel alone where it can
    // say (PROCMAP_QUERY, Linux 6.11+: a few per 100 ms and process), and the file mapping found is kept beside
    // them; on older kernels the maps are read again, by a fork child at its first miss and by any process
    // shortly after it opened a library (dlopen maps it right after). The frame's range is exact for the maps and
    // symbols the answer came from: the whole function (cut where another symbol starts or ends, to the
    // mapping and to one loadable segment), the gap between symbols, the whole mapping where the file has no
    // symbols or is not a file; just ip where it came from an ancestor's maps or from none.
    NativeFrame resolve(uint32_t pid, uint64_t ip);
    // The file and file offset of a mapped address (through the same maps as resolve), for its CFI.
    std::optional<CodePlace> place(uint32_t pid, uint64_t ip);
    // The process opened a shared library (it may map it now), or exec'd (everything changed).
    void library_opened(uint32_t pid);
    void execed(uint32_t pid) { maps_.erase(pid); }
    // A forked child has its parent's mappings (as far as they were read): used until it misses them, and once
    // the child itself is gone (through the process tree's parents).
    void forked(uint32_t pid, uint32_t parent);
    size_t files_loaded() const { return files_.size(); }
    size_t maps_read() const { return maps_read_; }       // /proc/PID/maps files read so far
    size_t maps_queried() const { return maps_queried_; } // addresses asked of the kernel one at a time
    // Which reading of its maps the process's addresses resolve through now (0: none yet); a fork child shares
    // its parent's until it reads its own. Ranges resolved through another reading may not hold any more.
    uint64_t maps_generation(uint32_t pid) const
    {
        auto it = maps_.find(pid);
        return it == maps_.end() ? 0 : it->second.generation;
    }

private:
    const std::vector<proc::Mapping>* maps(uint32_t pid, bool refresh);
    // The mapping holding ip, through how many parents' maps it was found (*hops) and whose (*owner).
    const proc::Mapping* mapping(uint32_t pid, uint64_t ip, int* hops, uint32_t* owner);
    // The very file a mapping of pid's maps, held open (proc::open_mapped), or nullptr. Checked again at each new
    // reading of the maps it is looked up through (the inode may be another file's by then); one that could not be
    // opened is tried again only then.
    struct LocalFile {
        common::UniqueFd fd;
        std::string path; // /proc/self/fd/N: opens that very file
        common::FileId id;
        uint64_t generation = 0; // the maps reading it was last checked at
    };
    const LocalFile* local_file(uint32_t pid, const proc::Mapping& map);
    const FunctionTable* table(const LocalFile& file);
    struct Maps {
        std::shared_ptr<const std::vector<proc::Mapping>> maps;
        uint64_t read_ms = 0;
        uint64_t reread_until_ms = 0; // a miss re-reads the maps until then (a library was opened)
        bool inherited = false;       // the parent's at fork, shared: a miss reads the process's own
        uint64_t generation = 0;      // which reading this is, numbered over all processes
        std::vector<proc::Mapping> found; // file mappings asked of the kernel one at a time since, by address
        uint64_t query_window_ms = 0;
        unsigned queries = 0; // asked in the 100 ms from query_window_ms
    };
    // ip's file mapping in pid, found beside its maps or asked of the kernel now (*answered: whether the kernel
    // could be asked; where not, the caller reads the maps again).
    const proc::Mapping* queried(uint32_t pid, uint64_t ip, bool* answered);
    uint64_t generations_ = 0;
    std::unordered_map<uint32_t, Maps> maps_;
    const proc::ProcessTree& tree_;
    std::map<common::FileId, std::unique_ptr<FunctionTable>> files_; // null: unreadable
    std::map<std::tuple<uint32_t, uint32_t, uint64_t>, LocalFile> local_; // by the maps' (dev major, minor, inode)
    size_t maps_read_ = 0, maps_queried_ = 0;
};

} // namespace lotus::elf
