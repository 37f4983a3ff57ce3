#include "slot_functions.h"

#include <elf.h>

#include <cstring>
#include <fmt/format.h>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "elf_file.h"

namespace lotus::target {

namespace {

// A slotdefs entry (struct wrapperbase, Include/cpython/descrobject.h; the same 3.8-3.14 on x86_64):
// name 0, offset 8 (int), function 16, wrapper 24, doc 32, flags 40, name_strobj 48.
constexpr uint64_t kEntryOffset = 8, kEntryFunction = 16;

struct Wanted {
    int slot;
    std::string_view name;
    int32_t type_offset; // offsetof(PyTypeObject, tp_*) on x86_64, unchanged 3.8-3.14: the entry's `offset`
};
constexpr Wanted kWanted[] = {
    {LOTUS_SLOT_CALL, "__call__", 128},
    {LOTUS_SLOT_ITER, "__iter__", 216},
    {LOTUS_SLOT_NEXT, "__next__", 224},
};

} // namespace

std::optional<SlotFunctions> find_slot_functions(const ElfFile& elf, std::string* why)
{
    auto fail = [&](std::string reason) -> std::optional<SlotFunctions> {
        if (why)
            *why = std::move(reason);
        return std::nullopt;
    };
    auto sections = elf.sections();
    // The names' addresses: NUL-terminated strings in .rodata (the linker may have merged one into the tail of
    // a longer string, so any occurrence counts).
    std::map<uint64_t, int> name_at; // address of a name -> slot
    for (const auto& s : sections) {
        if (s.name != ".rodata" || s.type != SHT_PROGBITS || s.size > (64u << 20))
            continue;
        auto bytes = elf.read_at(s.offset, s.size);
        if (!bytes)
            return fail("cannot read .rodata");
        std::string_view data(reinterpret_cast<const char*>(bytes->data()), bytes->size());
        for (const auto& w : kWanted) {
            std::string needle(w.name);
            needle.push_back('\0');
            for (size_t at = data.find(needle); at != std::string_view::npos; at = data.find(needle, at + 1))
                name_at[s.vaddr + at] = w.slot;
        }
    }
    if (name_at.empty())
        return fail("no dunder names in .rodata");
    // Pointers to them: relocated words of a position-independent file, else words stored as they are.
    std::map<uint64_t, uint64_t> relocated; // where -> value
    for (auto [where, value] : elf.relative_relocations())
        relocated[where] = value;
    std::vector<std::pair<uint64_t, int>> entries; // (entry address, slot)
    for (const auto& [where, value] : relocated)
        if (auto it = name_at.find(value); it != name_at.end())
            entries.emplace_back(where, it->second);
    if (relocated.empty()) {
        for (const auto& s : sections) {
            if (s.type != SHT_PROGBITS || !(s.flags & SHF_ALLOC) || !(s.flags & SHF_WRITE) || s.size > (64u << 20))
                continue;
            auto bytes = elf.read_at(s.offset, s.size);
            for (size_t i = 0; bytes && i + 8 <= bytes->size(); i += 8) {
                uint64_t v;
                memcpy(&v, bytes->data() + i, 8);
                if (auto it = name_at.find(v); it != name_at.end())
                    entries.emplace_back(s.vaddr + i, it->second);
            }
        }
    }
    // Each entry must name the PyTypeObject field of its slot, and point at code.
    auto executable = [&](uint64_t a) {
        for (const auto& s : sections)
            if ((s.flags & SHF_EXECINSTR) && a >= s.vaddr && a < s.vaddr + s.size)
                return true;
        return false;
    };
    SlotFunctions out;
    std::map<int, std::set<uint64_t>> found;
    for (auto [at, slot] : entries) {
        auto head = elf.read(at, kEntryFunction + 8);
        if (!head)
            continue;
        int32_t offset;
        uint64_t fn;
        memcpy(&offset, head->data() + kEntryOffset, 4);
        memcpy(&fn, head->data() + kEntryFunction, 8);
        if (auto r = relocated.find(at + kEntryFunction); r != relocated.end())
            fn = r->second;
        for (const auto& w : kWanted)
            if (w.slot == slot && w.type_offset == offset && executable(fn))
                found[slot].insert(fn);
    }
    for (const auto& w : kWanted) {
        const auto& fns = found[w.slot];
        if (fns.size() != 1)
            return fail(fmt::format("{} entries of {} in the slot table", fns.size(), w.name));
        out.vaddr[static_cast<size_t>(w.slot)] = *fns.begin();
    }
    return out;
}

} // namespace lotus::target
