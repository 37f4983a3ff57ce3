// Symbols, segments and dynamic entries of an ELF file, read with libelf.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lotus::elf {

struct ElfSection {
    std::string name;
    uint64_t vaddr = 0, offset = 0, size = 0; // address (0 when not loaded), file offset, bytes
    uint32_t type = 0;                        // SHT_*
    uint64_t flags = 0;                       // SHF_*
};

struct ElfSymbol {
    uint64_t value = 0; // virtual address in the file's own address space
    uint64_t size = 0;
    bool function = false;
};

class ElfFile {
public:
    // Throws std::runtime_error with a one-line reason when the file cannot be opened or is not ELF.
    explicit ElfFile(const std::string& path);
    ~ElfFile();
    ElfFile(const ElfFile&) = delete;
    ElfFile& operator=(const ElfFile&) = delete;

    const std::string& path() const { return path_; }
    // Looks in .dynsym, then .symtab.
    std::optional<ElfSymbol> symbol(const std::string& name) const;
    // Every defined function symbol (name, symbol), in no particular order.
    std::vector<std::pair<std::string, ElfSymbol>> functions() const;
    // File offset of a virtual address, through the PT_LOAD segments; what a uprobe wants.
    std::optional<uint64_t> file_offset(uint64_t vaddr) const;
    // ...and back: the virtual address a file offset is loaded at (for a sampled address in a mapping).
    std::optional<uint64_t> vaddr_of(uint64_t file_offset) const;
    // The file offsets around file_offset that vaddr_of moves by one constant, [lo, hi), and the address of lo.
    struct LoadPiece {
        uint64_t lo, hi, vaddr;
    };
    std::optional<LoadPiece> load_piece(uint64_t file_offset) const;
    // Bytes stored in the file at a virtual address (for constants such as Py_Version).
    std::optional<std::vector<uint8_t>> read(uint64_t vaddr, size_t len) const;
    std::vector<std::string> needed() const;  // DT_NEEDED
    std::vector<std::string> runpath() const; // DT_RUNPATH, else DT_RPATH, split on ':'
    // The GNU build ID in hex (what /usr/lib/debug/.build-id/ files are named by), or "".
    std::string build_id() const;
    // The first section of this name: (file offset, size).
    std::optional<std::pair<uint64_t, uint64_t>> section(const std::string& name) const;
    std::vector<ElfSection> sections() const;
    // Bytes stored at a file offset.
    std::optional<std::vector<uint8_t>> read_at(uint64_t offset, size_t len) const;
    // The relative relocations of a position-independent file: (where, value) pairs, the word at `where`
    // holding `value` plus the load address once loaded. Pointers in such files' data are only found here
    // (the stored word may be 0).
    std::vector<std::pair<uint64_t, uint64_t>> relative_relocations() const;

private:
    struct Impl;
    std::string path_;
    std::unique_ptr<Impl> impl_;
};

} // namespace lotus::elf
