#include "cpython/builtin_functions.h"

#include <cstring>
#include <fmt/format.h>
#include <set>

#include "elf/elf_file.h"
#include "elf/static_tables.h"

namespace lotus::cpython {

namespace {

// struct PyMethodDef on x86_64: ml_name 0, ml_meth 8, ml_flags 16 (int), ml_doc 24.
constexpr uint64_t kMeth = 8, kFlags = 16, kDoc = 24;
constexpr int32_t kMethFastcall = 0x0080;
constexpr std::string_view kDocStart = "read($module, fd, length, /)\n";

} // namespace

std::optional<uint64_t> find_os_read(const elf::ElfFile& elf, std::string* why)
{
    auto fail = [&](std::string reason) -> std::optional<uint64_t> {
        if (why)
            *why = std::move(reason);
        return std::nullopt;
    };
    elf::StaticTables tables(elf);
    auto docs = tables.rodata(kDocStart);
    if (!docs)
        return fail("cannot read .rodata");
    std::set<uint64_t> found;
    for (auto [doc_at, doc] : tables.words_to(*docs)) {
        uint64_t entry = doc_at - kDoc;
        auto name = tables.word(entry);
        auto meth = tables.word(entry + kMeth);
        auto flags = elf.read(entry + kFlags, 4);
        auto name_bytes = name ? elf.read(*name, 5) : std::nullopt;
        if (!meth || !flags || !name_bytes || memcmp(name_bytes->data(), "read", 5) != 0)
            continue;
        int32_t f;
        memcpy(&f, flags->data(), 4);
        if (f == kMethFastcall && tables.executable(*meth))
            found.insert(*meth);
    }
    if (found.size() != 1)
        return fail(fmt::format("{} method-table entries of os.read", found.size()));
    return *found.begin();
}

} // namespace lotus::cpython
