#include "cpython/slot_functions.h"

#include <cstring>
#include <fmt/format.h>
#include <map>
#include <set>
#include <string_view>

#include "elf/elf_file.h"
#include "elf/static_tables.h"

namespace lotus::cpython {

namespace {

// A slotdefs entry (struct wrapperbase, Include/cpython/descrobject.h; the same 3.8-3.15 on x86_64):
// name 0, offset 8 (int), function 16, wrapper 24, doc 32, flags 40, name_strobj 48.
constexpr uint64_t kEntryOffset = 8, kEntryFunction = 16;

struct Wanted {
    int slot;
    std::string_view name;
    int32_t type_offset; // offsetof(PyTypeObject, tp_*) on x86_64, unchanged 3.8-3.15: the entry's `offset`
};
constexpr Wanted kWanted[] = {
    {LOTUS_SLOT_CALL, "__call__", 128},
    {LOTUS_SLOT_ITER, "__iter__", 216},
    {LOTUS_SLOT_NEXT, "__next__", 224},
};

} // namespace

std::optional<SlotFunctions> find_slot_functions(const elf::ElfFile& elf, std::string* why)
{
    auto fail = [&](std::string reason) -> std::optional<SlotFunctions> {
        if (why)
            *why = std::move(reason);
        return std::nullopt;
    };
    elf::StaticTables tables(elf);
    // The names' addresses, NUL-terminated strings in .rodata, and the table entries that point at them.
    std::set<uint64_t> names;
    std::map<uint64_t, int> name_at; // address of a name -> slot
    for (const auto& w : kWanted) {
        std::string needle(w.name);
        needle.push_back('\0');
        auto at = tables.rodata(needle);
        if (!at)
            return fail("cannot read .rodata");
        for (uint64_t a : *at) {
            names.insert(a);
            name_at[a] = w.slot;
        }
    }
    if (name_at.empty())
        return fail("no dunder names in .rodata");
    // Each entry must name the PyTypeObject field of its slot, and point at code.
    std::map<int, std::set<uint64_t>> found;
    for (auto [at, name] : tables.words_to(names)) {
        int slot = name_at[name];
        auto head = elf.read(at, kEntryOffset + 4);
        auto fn = tables.word(at + kEntryFunction);
        if (!head || !fn)
            continue;
        int32_t offset;
        memcpy(&offset, head->data() + kEntryOffset, 4);
        for (const auto& w : kWanted)
            if (w.slot == slot && w.type_offset == offset && tables.executable(*fn))
                found[slot].insert(*fn);
    }
    SlotFunctions out;
    for (const auto& w : kWanted) {
        const auto& fns = found[w.slot];
        if (fns.size() != 1)
            return fail(fmt::format("{} entries of {} in the slot table", fns.size(), w.name));
        out.vaddr[static_cast<size_t>(w.slot)] = *fns.begin();
    }
    return out;
}

} // namespace lotus::cpython
