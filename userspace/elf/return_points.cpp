#include "return_points.h"

#include <capstone/capstone.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <set>

#include "elf_file.h"

namespace lotus::elf {

namespace {

struct Capstone {
    csh h = 0;
    cs_insn* insn = nullptr;
    bool ok = false;
    Capstone()
    {
        if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
            return;
        cs_option(h, CS_OPT_DETAIL, CS_OPT_ON); // (operands: where a jump goes)
        insn = cs_malloc(h);
        ok = insn != nullptr;
    }
    ~Capstone()
    {
        if (insn)
            cs_free(insn, 1);
        if (h)
            cs_close(&h);
    }
};

constexpr size_t kMaxRegions = 16;         // a function and the code it jumps to, followed this far
constexpr uint64_t kMaxBytes = 4u << 20;   // in all

} // namespace

std::optional<CodeExits> code_exits(std::span<const uint8_t> code, uint64_t vaddr)
{
    Capstone cs;
    if (!cs.ok)
        return std::nullopt;
    const uint8_t* p = code.data();
    size_t left = code.size();
    uint64_t at = vaddr, end = vaddr + code.size();
    CodeExits out;
    while (left > 0) {
        uint64_t here = at;
        if (!cs_disasm_iter(cs.h, &p, &left, &at, cs.insn))
            return std::nullopt; // undecodable bytes, or an instruction cut by the end
        if (cs.insn->id == X86_INS_RET) { // ret, ret imm16, and with prefixes (rep ret, bnd ret)
            out.returns.push_back(here);
            continue;
        }
        if (!cs_insn_group(cs.h, cs.insn, X86_GRP_JUMP) || cs.insn->detail->x86.op_count != 1)
            continue;
        const cs_x86_op& op = cs.insn->detail->x86.operands[0];
        if (op.type == X86_OP_IMM) {
            uint64_t target = static_cast<uint64_t>(op.imm);
            if (target < vaddr || target >= end)
                out.jumps_out.push_back(target);
        } else if (op.type == X86_OP_MEM) {
            out.through_memory++;
        }
    }
    return out;
}

// The start of every function the unwind table describes, from .eh_frame_hdr's sorted search table (each FDE's
// initial location), as GNU ld and lld write it: table entries datarel sdata4, relative to the section's start.
static std::vector<uint64_t> unwind_starts(const ElfFile& elf)
{
    std::vector<uint64_t> out;
    for (const auto& s : elf.sections()) {
        if (s.name != ".eh_frame_hdr" || s.size < 12 || !s.vaddr)
            continue;
        auto b = elf.read_at(s.offset, s.size);
        // version 1; eh_frame_ptr pcrel sdata4 (0x1b); fde_count udata4 (0x03); table datarel sdata4 (0x3b)
        if (!b || (*b)[0] != 1 || (*b)[1] != 0x1b || (*b)[2] != 0x03 || (*b)[3] != 0x3b)
            return out;
        auto u32 = [&](size_t at) {
            uint32_t v;
            memcpy(&v, b->data() + at, 4);
            return v;
        };
        uint64_t n = u32(8);
        if (12 + n * 8 > b->size())
            return out;
        for (uint64_t i = 0; i < n; i++)
            out.push_back(s.vaddr + static_cast<int64_t>(static_cast<int32_t>(u32(12 + i * 8))));
    }
    return out;
}

ReturnFinder::ReturnFinder(const ElfFile& elf) : elf_(elf)
{
    for (const auto& [name, sym] : elf.functions()) {
        starts_.insert(sym.value);
        if (sym.size)
            symbol_sizes_.emplace(sym.value, sym.size);
    }
    for (uint64_t a : unwind_starts(elf))
        starts_.insert(a);
    for (const auto& s : elf.sections())
        if (s.name == ".plt" || s.name == ".plt.sec" || s.name == ".plt.got")
            plt_.emplace_back(s.vaddr, s.vaddr + s.size);
}

uint64_t ReturnFinder::extent(uint64_t vaddr) const
{
    if (auto s = symbol_sizes_.find(vaddr); s != symbol_sizes_.end())
        return s->second;
    // A static function (no symbol in a stripped library) or a cold part: where its unwind table's entry begins,
    // up to the next function's start (the padding between decodes as no-ops).
    auto it = starts_.find(vaddr);
    if (it == starts_.end() || std::next(it) == starts_.end())
        return 0;
    return *std::next(it) - vaddr;
}

std::optional<FunctionReturns> ReturnFinder::find(uint64_t vaddr, uint64_t size) const
{
    if (size == 0)
        return std::nullopt;
    FunctionReturns out;
    std::set<uint64_t> returns, visited{vaddr};
    std::deque<std::pair<uint64_t, uint64_t>> regions{{vaddr, size}};
    uint64_t bytes_seen = 0;
    for (size_t n = 0; !regions.empty(); n++) {
        auto [lo, len] = regions.front();
        regions.pop_front();
        bool own = n == 0;
        bytes_seen += len;
        auto bytes = len <= kMaxBytes && bytes_seen <= kMaxBytes ? elf_.read(lo, len) : std::nullopt;
        auto exits = bytes ? code_exits(*bytes, lo) : std::nullopt;
        if (!exits) {
            if (own)
                return std::nullopt;
            out.blind_exits++; // (code jumped to that does not decode whole: its returns are not probed)
            continue;
        }
        for (uint64_t r : exits->returns) {
            auto off = elf_.file_offset(r);
            if (!off)
                return std::nullopt;
            returns.insert(*off);
        }
        out.blind_exits += exits->through_memory;
        for (uint64_t t : exits->jumps_out) {
            bool plt = std::any_of(plt_.begin(), plt_.end(), [t](const auto& s) { return s.first <= t && t < s.second; });
            if (plt) {
                out.blind_exits++;
                continue;
            }
            if (visited.count(t))
                continue;
            uint64_t ext = extent(t);
            if (!ext || visited.size() >= kMaxRegions) {
                out.blind_exits++;
                continue;
            }
            visited.insert(t);
            regions.emplace_back(t, ext);
        }
    }
    out.returns.assign(returns.begin(), returns.end());
    return out;
}

} // namespace lotus::elf
