#include "elf/elf_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <memory>

#include "common/arch.h"
#include "common/unique_fd.h"
#include <unordered_map>

namespace lotus::elf {

// Owned so that a constructor that throws (not an ELF file) leaks neither: the handle goes before the fd.
struct ElfEnd {
    void operator()(Elf* e) const { elf_end(e); }
};

struct ElfFile::Impl {
    common::UniqueFd fd;
    std::unique_ptr<Elf, ElfEnd> elf_handle;
    Elf* elf = nullptr; // elf_handle's
    std::unordered_map<std::string, ElfSymbol> symbols; // .symtab entries override nothing from .dynsym
    std::vector<GElf_Phdr> loads;
    std::vector<std::string> needed, runpath, rpath;
};

static void load_symbols(Elf* elf, Elf_Scn* scn, const GElf_Shdr& sh,
                         std::unordered_map<std::string, ElfSymbol>& out)
{
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || sh.sh_entsize == 0)
        return;
    size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; i++) {
        GElf_Sym sym;
        if (!gelf_getsym(data, static_cast<int>(i), &sym) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
            continue;
        const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
        if (!name || !*name)
            continue;
        int type = GELF_ST_TYPE(sym.st_info);
        out.try_emplace(name, ElfSymbol{sym.st_value, sym.st_size, type == STT_FUNC || type == STT_GNU_IFUNC});
    }
}

ElfFile::ElfFile(const std::string& path) : path_(path), impl_(std::make_unique<Impl>())
{
    elf_version(EV_CURRENT);
    // O_NONBLOCK and a regular file only: a path a traced process named may have become a FIFO (an open would
    // wait for a writer) or a device. Read, not mapped: a file truncated under us then fails a read, where a
    // mapping's missing pages would kill the tracer with SIGBUS.
    impl_->fd.reset(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!impl_->fd)
        throw std::runtime_error("cannot open " + path + ": " + strerror(errno));
    struct stat st;
    if (fstat(impl_->fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        throw std::runtime_error(path + " is not a regular file");
    impl_->elf_handle.reset(elf_begin(impl_->fd.get(), ELF_C_READ, nullptr));
    impl_->elf = impl_->elf_handle.get();
    if (!impl_->elf || elf_kind(impl_->elf) != ELF_K_ELF)
        throw std::runtime_error(path + " is not an ELF file");

    size_t nph = 0;
    elf_getphdrnum(impl_->elf, &nph);
    for (size_t i = 0; i < nph; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(impl_->elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
            impl_->loads.push_back(ph);
    }
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(impl_->elf, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        if (sh.sh_type == SHT_DYNSYM)
            load_symbols(impl_->elf, scn, sh, impl_->symbols);
        if (sh.sh_type == SHT_DYNAMIC) {
            Elf_Data* data = elf_getdata(scn, nullptr);
            size_t n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
            for (size_t i = 0; data && i < n; i++) {
                GElf_Dyn dyn;
                if (!gelf_getdyn(data, static_cast<int>(i), &dyn))
                    continue;
                auto str = [&] {
                    const char* s = elf_strptr(impl_->elf, sh.sh_link, dyn.d_un.d_val);
                    return std::string(s ? s : "");
                };
                auto split = [](const std::string& s) {
                    std::vector<std::string> parts;
                    std::stringstream ss(s);
                    std::string p;
                    while (std::getline(ss, p, ':'))
                        if (!p.empty())
                            parts.push_back(p);
                    return parts;
                };
                if (dyn.d_tag == DT_NEEDED)
                    impl_->needed.push_back(str());
                else if (dyn.d_tag == DT_RUNPATH)
                    impl_->runpath = split(str());
                else if (dyn.d_tag == DT_RPATH)
                    impl_->rpath = split(str());
            }
        }
    }
    // .symtab after .dynsym so dynamic names win; it adds the static functions of unstripped files.
    scn = nullptr;
    while ((scn = elf_nextscn(impl_->elf, scn))) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB)
            load_symbols(impl_->elf, scn, sh, impl_->symbols);
    }
}

ElfFile::~ElfFile() = default;

std::optional<ElfSymbol> ElfFile::symbol(const std::string& name) const
{
    auto it = impl_->symbols.find(name);
    if (it == impl_->symbols.end())
        return std::nullopt;
    return it->second;
}

std::optional<uint64_t> ElfFile::file_offset(uint64_t vaddr) const
{
    for (const auto& ph : impl_->loads)
        if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz)
            return vaddr - ph.p_vaddr + ph.p_offset;
    return std::nullopt;
}

std::vector<std::pair<std::string, ElfSymbol>> ElfFile::functions() const
{
    std::vector<std::pair<std::string, ElfSymbol>> out;
    for (const auto& [name, sym] : impl_->symbols)
        if (sym.function)
            out.emplace_back(name, sym);
    return out;
}

std::optional<uint64_t> ElfFile::vaddr_of(uint64_t off) const
{
    for (const auto& ph : impl_->loads)
        if (off >= ph.p_offset && off < ph.p_offset + ph.p_filesz)
            return off - ph.p_offset + ph.p_vaddr;
    return std::nullopt;
}

std::optional<ElfFile::LoadPiece> ElfFile::load_piece(uint64_t off) const
{
    const auto& loads = impl_->loads;
    for (size_t i = 0; i < loads.size(); i++) {
        const auto& ph = loads[i];
        if (off < ph.p_offset || off >= ph.p_offset + ph.p_filesz)
            continue;
        // vaddr_of takes the first segment that holds an offset: leave out what an earlier one holds.
        uint64_t lo = ph.p_offset, hi = ph.p_offset + ph.p_filesz;
        for (size_t k = 0; k < i; k++) {
            uint64_t elo = loads[k].p_offset, ehi = loads[k].p_offset + loads[k].p_filesz;
            if (elo > off)
                hi = std::min(hi, elo);
            else // ehi <= off: it does not hold off
                lo = std::max(lo, ehi);
        }
        return LoadPiece{lo, hi, lo - ph.p_offset + ph.p_vaddr};
    }
    return std::nullopt;
}

std::optional<std::vector<uint8_t>> ElfFile::read(uint64_t vaddr, size_t len) const
{
    auto off = file_offset(vaddr);
    if (!off)
        return std::nullopt;
    std::vector<uint8_t> buf(len);
    if (pread(impl_->fd.get(), buf.data(), len, static_cast<off_t>(*off)) != static_cast<ssize_t>(len))
        return std::nullopt;
    return buf;
}

std::vector<std::string> ElfFile::needed() const { return impl_->needed; }

std::vector<std::string> ElfFile::runpath() const
{
    return impl_->runpath.empty() ? impl_->rpath : impl_->runpath;
}

std::optional<std::pair<uint64_t, uint64_t>> ElfFile::section(const std::string& name) const
{
    for (const auto& s : sections())
        if (s.name == name)
            return std::make_pair(s.offset, s.size);
    return std::nullopt;
}

std::vector<ElfSection> ElfFile::sections() const
{
    std::vector<ElfSection> out;
    size_t shstrndx = 0;
    if (elf_getshdrstrndx(impl_->elf, &shstrndx) != 0)
        return out;
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(impl_->elf, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        const char* n = elf_strptr(impl_->elf, shstrndx, sh.sh_name);
        out.push_back({n ? n : "", sh.sh_addr, sh.sh_offset, sh.sh_size, sh.sh_type, sh.sh_flags});
    }
    return out;
}

std::optional<std::vector<uint8_t>> ElfFile::read_at(uint64_t offset, size_t len) const
{
    std::vector<uint8_t> buf(len);
    if (pread(impl_->fd.get(), buf.data(), len, static_cast<off_t>(offset)) != static_cast<ssize_t>(len))
        return std::nullopt;
    return buf;
}

std::vector<std::pair<uint64_t, uint64_t>> ElfFile::relative_relocations() const
{
    std::vector<std::pair<uint64_t, uint64_t>> out;
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(impl_->elf, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || sh.sh_entsize == 0)
            continue;
        Elf_Data* data = elf_getdata(scn, nullptr);
        size_t n = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; data && i < n; i++) {
            GElf_Rela r;
            if (gelf_getrela(data, static_cast<int>(i), &r) && GELF_R_TYPE(r.r_info) == common::kRelativeRelocation)
                out.emplace_back(r.r_offset, static_cast<uint64_t>(r.r_addend));
        }
    }
    return out;
}

} // namespace lotus::elf

namespace lotus::elf {

std::string ElfFile::build_id() const
{
    auto sec = section(".note.gnu.build-id");
    if (!sec || sec->second < 16 || sec->second > 256)
        return "";
    std::vector<uint8_t> note(sec->second);
    if (pread(impl_->fd.get(), note.data(), note.size(), static_cast<off_t>(sec->first)) != static_cast<ssize_t>(note.size()))
        return "";
    uint32_t namesz, descsz, type;
    memcpy(&namesz, note.data(), 4);
    memcpy(&descsz, note.data() + 4, 4);
    memcpy(&type, note.data() + 8, 4);
    size_t desc = 12 + ((namesz + 3) & ~3u);
    if (type != NT_GNU_BUILD_ID || desc + descsz > note.size())
        return "";
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < descsz; i++) {
        out += hex[note[desc + i] >> 4];
        out += hex[note[desc + i] & 15];
    }
    return out;
}

} // namespace lotus::elf

