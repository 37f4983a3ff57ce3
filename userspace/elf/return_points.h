// Where a native function's calls return to their caller: the return instructions of its own code and of the code
// it jumps to (a tail call, its cold part), found by decoding its bytes (Capstone). A probe there, unlike a return
// probe, leaves the call's return address alone, so C++ exceptions, unwinders and debuggers walk the job's stack as
// they would untraced (docs/native-map.md, "Entries and returns").
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <optional>
#include <span>
#include <vector>

namespace lotus::elf {

class ElfFile;

// How the code in [vaddr, vaddr + size) can be left, decoded from its first byte to its last.
struct CodeExits {
    std::vector<uint64_t> returns;   // addresses of return instructions
    std::vector<uint64_t> jumps_out; // targets of direct jumps (conditional or not) outside it
    size_t through_memory = 0;       // jumps through a pointer in memory (a GOT entry, a vtable): not followed
};
// nullopt where some bytes do not decode as instructions or the last one runs past the end (data, or code a
// linear decoding cannot be sure of): a probe placed inside an instruction would break it. Jumps through a
// register are taken to be a jump table's (inside the code).
std::optional<CodeExits> code_exits(std::span<const uint8_t> code, uint64_t vaddr);

struct FunctionReturns {
    std::vector<uint64_t> returns; // file offsets (what a uprobe wants), each once
    size_t blind_exits = 0;        // jumps that leave where no probe follows (into another library, through memory)
};

// Per library file: the functions' return points, following direct jumps out of a function into code whose extent
// the file says (a function symbol starting there, or its unwind table's entry up to the next function), a few
// levels deep.
class ReturnFinder {
public:
    explicit ReturnFinder(const ElfFile& elf);
    // nullopt where the function's own bytes cannot be read or decoded whole, or its size is unknown (0).
    std::optional<FunctionReturns> find(uint64_t vaddr, uint64_t size) const;

private:
    // The extent of the code starting at `vaddr`: a function symbol's, else its unwind entry's; 0 if unknown.
    uint64_t extent(uint64_t vaddr) const;
    const ElfFile& elf_;
    std::map<uint64_t, uint64_t> symbol_sizes_;      // function start -> size
    std::set<uint64_t> starts_;                      // every function start: symbols', unwind table entries'
    std::vector<std::pair<uint64_t, uint64_t>> plt_; // [lo, hi) of the PLT sections: jumps into other libraries
};

} // namespace lotus::elf
