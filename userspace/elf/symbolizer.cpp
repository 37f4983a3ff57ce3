#include "elf/symbolizer.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <stdexcept>

#include "common/clock.h"
#include "common/path.h"
#include "elf/elf_file.h"

namespace lotus::elf {

namespace {
uint64_t monotonic_ms()
{
    return common::monotonic_ns() / 1'000'000;
}
} // namespace

std::string demangle(const std::string& name, bool with_params)
{
    if (name.rfind("_Z", 0) != 0)
        return name;
    int status = 0;
    char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    if (status != 0 || !d)
        return name;
    std::string out(d);
    free(d);
    if (with_params)
        return out;
    // Cut at the parameter list: the first '(' outside template arguments that does not open
    // "(anonymous namespace)".
    int angle = 0;
    for (size_t i = 0; i < out.size(); i++) {
        char c = out[i];
        if (c == '<')
            angle++;
        else if (c == '>')
            angle--;
        else if (c == '(' && angle == 0 && out.compare(i, 21, "(anonymous namespace)") != 0)
            return out.substr(0, i);
        else if (c == '(' && angle == 0)
            i += 20;
    }
    return out;
}

FunctionTable::FunctionTable(const std::string& path) : elf_(std::make_unique<ElfFile>(path))
{
    auto add = [&](const ElfFile& f) {
        for (auto& [name, sym] : f.functions()) {
            if (!sym.size)
                continue;
            names_.push_back(std::move(name));
            entries_.push_back({sym.value, sym.value + sym.size, static_cast<uint32_t>(names_.size() - 1)});
        }
    };
    add(*elf_);
    // A stripped file's static functions, from its detached debug file where one is installed (as perf and
    // gdb look for it: e.g. libc6-dbg). Same addresses; duplicates are harmless to the lookup.
    std::string id = elf_->build_id();
    if (id.size() > 2) {
        std::string debug = "/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
        try {
            add(ElfFile(debug));
        } catch (const std::exception&) {
        }
    }
    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.start < b.start; });
    demangled_.assign(names_.size(), false);
}

FunctionTable::~FunctionTable() = default;

const std::string* FunctionTable::find_offset(uint64_t file_offset) const
{
    auto v = elf_->vaddr_of(file_offset);
    return v ? find(*v) : nullptr;
}

const std::string* FunctionTable::find_offset_range(uint64_t file_offset, uint64_t* lo, uint64_t* hi) const
{
    auto piece = elf_->load_piece(file_offset);
    if (!piece) {
        *lo = file_offset, *hi = file_offset + 1;
        return nullptr;
    }
    uint64_t v = file_offset - piece->lo + piece->vaddr, vlo, vhi;
    const std::string* name = find_range(v, &vlo, &vhi);
    // Within the piece, an offset and its address differ by one constant.
    *lo = piece->lo + (std::max(vlo, piece->vaddr) - piece->vaddr);
    *hi = piece->lo + (std::min(vhi, piece->vaddr + (piece->hi - piece->lo)) - piece->vaddr);
    return name;
}

const std::string* FunctionTable::find(uint64_t vaddr) const
{
    uint64_t lo, hi;
    return find_range(vaddr, &lo, &hi);
}

const std::string* FunctionTable::find_range(uint64_t vaddr, uint64_t* lo, uint64_t* hi) const
{
    auto it = std::upper_bound(entries_.begin(), entries_.end(), vaddr,
                               [](uint64_t v, const Entry& e) { return v < e.start; });
    // Every address from the last symbol start at or before vaddr to the next start meets the same symbols below:
    // it gets the same answer from the first of them (looking back) that covers it, where the ones looked at
    // before it have ended.
    *hi = it == entries_.end() ? UINT64_MAX : it->start;
    *lo = it == entries_.begin() ? 0 : std::prev(it)->start;
    // Symbols may overlap (aliases): look back over the few that start at or before vaddr.
    for (int back = 0; back < 4 && it != entries_.begin(); back++) {
        --it;
        if (vaddr >= it->start && vaddr < it->end) {
            *hi = std::min(*hi, it->end);
            if (!demangled_[it->name]) { // on first use: libtorch_cpu has ~10^5 names, a run meets a few hundred
                names_[it->name] = demangle(names_[it->name]);
                demangled_[it->name] = true;
            }
            return &names_[it->name];
        }
        *lo = std::max(*lo, it->end); // it ends at or before vaddr: below that end it would answer
    }
    return nullptr;
}

} // namespace lotus::elf

namespace lotus::elf {

const std::vector<proc::Mapping>* Symbolizer::maps(uint32_t pid, bool refresh)
{
    auto it = maps_.find(pid);
    if (it != maps_.end() && !refresh)
        return it->second.maps.get();
    // A miss re-reads the maps only for a while after the process opened a library, at most every 100 ms:
    // garbage caller addresses (stacks without frame pointers) miss all the time, and a torch process's maps
    // are thousands of lines (re-reading them 10 times a second was most of the tracer's sampling cost).
    // A forked child's first miss reads its own.
    uint64_t now = monotonic_ms();
    if (it != maps_.end() && !it->second.inherited &&
        (now >= it->second.reread_until_ms || now - it->second.read_ms < 100))
        return it->second.maps.get();
    try {
        auto m = std::make_shared<const std::vector<proc::Mapping>>(proc::read_maps(static_cast<int>(pid)));
        maps_read_++;
        auto& entry = maps_[pid];
        entry.maps = std::move(m);
        entry.read_ms = now;
        entry.inherited = false;
        entry.generation = ++generations_;
        entry.found.clear();
        return entry.maps.get();
    } catch (const std::exception&) {
        return it != maps_.end() ? it->second.maps.get() : nullptr; // gone: what was read before still holds
    }
}

void Symbolizer::forked(uint32_t pid, uint32_t parent)
{
    // A fork child starts with its parent's mappings: a DataLoader worker is symbolised without reading its
    // maps again (every epoch, for every worker; their length: docs/performance.md, "What costs what"). What it
    // maps later misses, and a miss reads its own; what it opens later (dlopen) re-reads them as for any
    // process.
    auto p = maps_.find(parent);
    if (p == maps_.end() || maps_.count(pid))
        return;
    auto shared = p->second.maps;
    Maps child;
    child.maps = std::move(shared);
    child.inherited = true;
    child.generation = p->second.generation;
    child.found = p->second.found;
    maps_[pid] = std::move(child);
}

const FunctionTable* Symbolizer::table(const LocalFile& file)
{
    auto it = files_.find(file.id);
    if (it != files_.end())
        return it->second.get();
    std::unique_ptr<FunctionTable> t;
    try {
        t = std::make_unique<FunctionTable>(file.path);
    } catch (const std::exception&) {
    }
    return (files_[file.id] = std::move(t)).get();
}

void Symbolizer::library_opened(uint32_t pid)
{
    if (auto it = maps_.find(pid); it != maps_.end())
        it->second.reread_until_ms = monotonic_ms() + 2000;
}

const Symbolizer::LocalFile* Symbolizer::local_file(uint32_t pid, const proc::Mapping& map)
{
    auto& entry = local_[std::make_tuple(map.dev_major, map.dev_minor, map.inode)];
    uint64_t generation = maps_generation(pid);
    if (entry.generation != generation || generation == 0) {
        entry.generation = generation;
        common::UniqueFd fd = proc::open_mapped(static_cast<int>(pid), map);
        auto id = common::file_id(fd.get());
        // Kept when it is still that file, or when nothing can be opened to say otherwise (the process is gone:
        // what its maps named was this file when they were read).
        if (id && (!entry.fd || *id != entry.id)) {
            entry.id = *id;
            entry.fd = std::move(fd);
            entry.path = "/proc/self/fd/" + std::to_string(entry.fd.get());
        }
    }
    return entry.fd ? &entry : nullptr;
}

const proc::Mapping* Symbolizer::mapping(uint32_t pid, uint64_t ip, int* hops, uint32_t* owner)
{
    // This process's maps (re-read on a miss), then its ancestors' (a fork child that already exited).
    uint32_t p = pid;
    for (int hop = 0; hop < 8 && p; hop++) {
        for (bool refresh : {false, true}) {
            const auto* m = maps(p, refresh);
            if (!m)
                break;
            // The kernel lists mappings by address: the last one starting at or below ip.
            auto after = std::upper_bound(m->begin(), m->end(), ip,
                                          [](uint64_t v, const proc::Mapping& map) { return v < map.start; });
            if (after != m->begin() && ip < std::prev(after)->end) {
                *hops = hop;
                *owner = p;
                return &*std::prev(after);
            }
            if (hop > 0)
                break;
            if (!refresh) {
                bool answered = false;
                if (const proc::Mapping* q = queried(p, ip, &answered)) {
                    *hops = 0;
                    *owner = p;
                    return q;
                }
                if (answered) // nothing is mapped there, or asking again so soon is too dear: not a re-read
                    break;
            }
        }
        p = tree_.parent(p);
    }
    return nullptr;
}

const proc::Mapping* Symbolizer::queried(uint32_t pid, uint64_t ip, bool* answered)
{
    auto it = maps_.find(pid);
    if (it == maps_.end())
        return nullptr;
    Maps& e = it->second;
    auto after = std::upper_bound(e.found.begin(), e.found.end(), ip,
                                  [](uint64_t v, const proc::Mapping& map) { return v < map.start; });
    if (after != e.found.begin() && ip < std::prev(after)->end) {
        *answered = true;
        return &*std::prev(after);
    }
    // Garbage words of a stack miss too (a walk's last frame): a few questions per 100 ms and process at most.
    uint64_t now = monotonic_ms();
    if (now - e.query_window_ms >= 100)
        e.query_window_ms = now, e.queries = 0;
    if (e.queries >= 16) {
        *answered = true;
        return nullptr;
    }
    proc::MappingQuery q;
    try {
        q = proc::query_file_mapping(static_cast<int>(pid), ip);
    } catch (const std::exception&) { // gone: what was read before still holds
        *answered = true;
        return nullptr;
    }
    *answered = q.supported;
    if (!q.supported)
        return nullptr;
    e.queries++;
    maps_queried_++;
    if (!q.found)
        return nullptr;
    // Beside the maps, not in them: they may be the parent's, shared. Ranges resolved before stay true (this
    // address was in no mapping then), so the generation stays.
    after = std::upper_bound(e.found.begin(), e.found.end(), q.found->start,
                             [](uint64_t v, const proc::Mapping& map) { return v < map.start; });
    if (after != e.found.begin() && std::prev(after)->end > q.found->start) // (an older answer it overlaps)
        after = e.found.erase(std::prev(after));
    while (after != e.found.end() && after->start < q.found->end)
        after = e.found.erase(after);
    return &*e.found.insert(after, std::move(*q.found));
}

std::optional<CodePlace> Symbolizer::place(uint32_t pid, uint64_t ip)
{
    int hop = 0;
    uint32_t owner = 0;
    const proc::Mapping* map = mapping(pid, ip, &hop, &owner);
    if (!map || map->path.empty() || map->path[0] != '/')
        return std::nullopt;
    const LocalFile* local = local_file(owner, *map);
    if (!local)
        return std::nullopt;
    return CodePlace{local->path, local->id, ip - map->start + map->offset};
}

NativeFrame Symbolizer::resolve(uint32_t pid, uint64_t ip)
{
    int hop = 0;
    uint32_t owner = 0;
    if (const proc::Mapping* found = mapping(pid, ip, &hop, &owner)) {
        const proc::Mapping& map = *found;
        NativeFrame f;
        f.lo = map.start, f.hi = map.end;
        if (map.path.empty() || map.path[0] != '/') {
            if (hop > 0)
                f.lo = ip, f.hi = ip + 1;
            return f; // anonymous memory (JIT code), the stack, [vdso]...
        }
        f.library = common::base_name(map.path);
        // The very file mapped (a container's own libraries, not the host's at the same path), else no name.
        const LocalFile* local = local_file(owner, map);
        if (const auto* t = local ? table(*local) : nullptr) {
            uint64_t off = ip - map.start + map.offset, lo, hi;
            if (const auto* name = t->find_offset_range(off, &lo, &hi))
                f.function = *name;
            // From file offsets back to addresses, within the mapping.
            f.lo = lo >= map.offset ? std::max(map.start, map.start + (lo - map.offset)) : map.start;
            f.hi = hi >= map.offset ? std::min(map.end, map.start + (hi - map.offset)) : map.start;
        }
        if (hop > 0) // an ancestor's maps: for this address only
            f.lo = ip, f.hi = ip + 1;
        return f;
    }
    return {};
}

} // namespace lotus::elf
