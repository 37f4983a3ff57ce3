#include "elf/static_tables.h"

#include <elf.h>

#include <cstring>

namespace lotus::elf {

StaticTables::StaticTables(const ElfFile& elf) : elf_(elf), sections_(elf.sections())
{
    for (auto [where, value] : elf.relative_relocations())
        relocated_[where] = value;
}

std::optional<std::set<uint64_t>> StaticTables::rodata(std::string_view bytes) const
{
    std::set<uint64_t> at;
    for (const auto& s : sections_) {
        if (s.name != ".rodata" || s.type != SHT_PROGBITS || s.size > (64u << 20))
            continue;
        auto data = elf_.read_at(s.offset, s.size);
        if (!data)
            return std::nullopt;
        std::string_view text(reinterpret_cast<const char*>(data->data()), data->size());
        for (size_t i = text.find(bytes); i != std::string_view::npos; i = text.find(bytes, i + 1))
            at.insert(s.vaddr + i);
    }
    return at;
}

std::vector<std::pair<uint64_t, uint64_t>> StaticTables::words_to(const std::set<uint64_t>& targets) const
{
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto& [where, value] : relocated_)
        if (targets.count(value))
            out.emplace_back(where, value);
    if (!relocated_.empty())
        return out;
    for (const auto& s : sections_) {
        if (s.type != SHT_PROGBITS || !(s.flags & SHF_ALLOC) || !(s.flags & SHF_WRITE) || s.size > (64u << 20))
            continue;
        auto bytes = elf_.read_at(s.offset, s.size);
        for (size_t i = 0; bytes && i + 8 <= bytes->size(); i += 8) {
            uint64_t v;
            memcpy(&v, bytes->data() + i, 8);
            if (targets.count(v))
                out.emplace_back(s.vaddr + i, v);
        }
    }
    return out;
}

std::optional<uint64_t> StaticTables::word(uint64_t at) const
{
    if (auto r = relocated_.find(at); r != relocated_.end())
        return r->second;
    auto bytes = elf_.read(at, 8);
    if (!bytes)
        return std::nullopt;
    uint64_t v;
    memcpy(&v, bytes->data(), 8);
    return v;
}

bool StaticTables::executable(uint64_t vaddr) const
{
    for (const auto& s : sections_)
        if ((s.flags & SHF_EXECINSTR) && vaddr >= s.vaddr && vaddr < s.vaddr + s.size)
            return true;
    return false;
}

} // namespace lotus::elf
