#include "elf/cfi_unwinder.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace lotus::elf {

// One file's CFI (libdw reads .eh_frame through .eh_frame_hdr's search table, lazily), and its loaded
// segments, to turn a mapping's file offsets into the addresses the CFI is written in.
class CfiFile {
public:
    CfiFile(const std::string& path, const common::FileId& id)
    {
        // Read, not mapped (a file truncated under us fails a read; a mapping would SIGBUS the tracer), and only a
        // regular file (O_NONBLOCK: a FIFO put at the path would block an open).
        fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        struct stat st;
        if (fd_ < 0 || common::file_id(fd_) != id || fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) ||
            elf_version(EV_CURRENT) == EV_NONE)
            return;
        raw_size_ = static_cast<size_t>(st.st_size);
        elf_ = elf_begin(fd_, ELF_C_READ, nullptr);
        size_t n = 0;
        if (!elf_ || elf_getphdrnum(elf_, &n) != 0)
            return;
        for (size_t i = 0; i < n; i++) {
            GElf_Phdr ph;
            if (gelf_getphdr(elf_, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
                loads_.push_back({ph.p_offset, ph.p_offset + ph.p_filesz, ph.p_vaddr});
        }
        cfi_ = dwarf_getcfi_elf(elf_);
    }
    ~CfiFile()
    {
        if (cfi_)
            dwarf_cfi_end(cfi_);
        if (elf_)
            elf_end(elf_);
        if (fd_ >= 0)
            close(fd_);
    }
    CfiFile(const CfiFile&) = delete;
    CfiFile& operator=(const CfiFile&) = delete;

    Dwarf_CFI* cfi() const { return cfi_; }
    // Whether the file's bytes before this offset end with a call instruction (a return address follows one): a
    // direct call (E8 rel32), or an indirect one (FF /2, with its ModRM's SIB and displacement, after prefixes:
    // REX, notrack, operand or address size).
    bool follows_call(uint64_t end) const
    {
        // (end itself is read where a ModRM wants a SIB byte after it: it must be in the file too.)
        if (fd_ < 0 || end < 9 || end >= raw_size_)
            return false;
        uint8_t bytes[10];
        if (pread(fd_, bytes, sizeof(bytes), static_cast<off_t>(end - 9)) != static_cast<ssize_t>(sizeof(bytes)))
            return false;
        const uint8_t* b = bytes + 9;
        if (b[-5] == 0xe8)
            return true;
        auto prefix = [](uint8_t x) { return (x >= 0x40 && x <= 0x4f) || x == 0x3e || x == 0x2e || x == 0x66 || x == 0x67; };
        for (int k = 2; k <= 9; k++) {
            int at = -k, extra = 0;
            while (extra < 2 && at < -2 && prefix(b[at]))
                at++, extra++;
            if (b[at] != 0xff || ((b[at + 1] >> 3) & 7) != 2)
                continue;
            uint8_t modrm = b[at + 1], mod = modrm >> 6, rm = modrm & 7;
            int len = 2;
            if (mod != 3) {
                bool sib = rm == 4;
                int disp = mod == 1 ? 1 : mod == 2 ? 4 : (rm == 5 || (sib && (b[at + 2] & 7) == 5)) ? 4 : 0;
                len += (sib ? 1 : 0) + disp;
            }
            if (len + extra == k)
                return true;
        }
        return false;
    }
    std::optional<uint64_t> vaddr_of(uint64_t offset) const
    {
        for (const auto& l : loads_)
            if (l.lo <= offset && offset < l.hi)
                return l.vaddr + (offset - l.lo);
        return std::nullopt;
    }

private:
    struct Load {
        uint64_t lo, hi, vaddr;
    };
    int fd_ = -1;
    Elf* elf_ = nullptr;
    Dwarf_CFI* cfi_ = nullptr;
    size_t raw_size_ = 0; // the file's size when opened
    std::vector<Load> loads_;
};

namespace {

constexpr int kRbp = 6, kRsp = 7, kRip = 16; // DWARF's x86-64 register numbers (16: the return address)

struct Regs {
    uint64_t value[17] = {};
    bool known[17] = {};
    void set(int r, uint64_t v) { value[r] = v, known[r] = true; }
};

struct Memory {
    const StackCopy& s;
    // The word at a stack address, where the copy holds it.
    std::optional<uint64_t> word(uint64_t addr) const
    {
        if (addr < s.sp || addr - s.sp + 8 > s.len)
            return std::nullopt;
        uint64_t v;
        memcpy(&v, s.bytes + (addr - s.sp), 8);
        return v;
    }
};

// A DWARF expression as CFI rules use them (x86-64's .eh_frame: register plus offset, the CFA, a few
// arithmetic operators, derefs of stack words; PLT entries' CFA mask the ip). Sets *is_value at a
// DW_OP_stack_value (the result is the register's value, not where it is saved).
std::optional<uint64_t> evaluate(const Dwarf_Op* ops, size_t n, const Regs& regs, std::optional<uint64_t> cfa,
                                 const Memory& mem, bool* is_value)
{
    std::vector<uint64_t> st;
    if (is_value)
        *is_value = false;
    auto pop = [&](uint64_t* v) {
        if (st.empty())
            return false;
        *v = st.back();
        st.pop_back();
        return true;
    };
    auto reg = [&](unsigned r, int64_t off) -> bool {
        if (r > 16 || !regs.known[r])
            return false;
        st.push_back(regs.value[r] + static_cast<uint64_t>(off));
        return true;
    };
    for (size_t i = 0; i < n; i++) {
        const Dwarf_Op& op = ops[i];
        uint8_t a = op.atom;
        uint64_t x, y;
        if (a >= DW_OP_breg0 && a <= DW_OP_breg31) {
            if (!reg(a - DW_OP_breg0, static_cast<int64_t>(op.number)))
                return std::nullopt;
        } else if (a >= DW_OP_lit0 && a <= DW_OP_lit31) {
            st.push_back(a - DW_OP_lit0);
        } else {
            switch (a) {
            case DW_OP_bregx:
                if (!reg(static_cast<unsigned>(op.number), static_cast<int64_t>(op.number2)))
                    return std::nullopt;
                break;
            case DW_OP_call_frame_cfa:
                if (!cfa)
                    return std::nullopt;
                st.push_back(*cfa);
                break;
            case DW_OP_const1u: case DW_OP_const2u: case DW_OP_const4u: case DW_OP_const8u: case DW_OP_constu:
            case DW_OP_const1s: case DW_OP_const2s: case DW_OP_const4s: case DW_OP_const8s: case DW_OP_consts:
                st.push_back(op.number);
                break;
            case DW_OP_plus_uconst:
                if (!pop(&x))
                    return std::nullopt;
                st.push_back(x + op.number);
                break;
            case DW_OP_deref:
                if (!pop(&x))
                    return std::nullopt;
                if (auto w = mem.word(x))
                    st.push_back(*w);
                else
                    return std::nullopt;
                break;
            case DW_OP_plus: case DW_OP_minus: case DW_OP_and: case DW_OP_shl: case DW_OP_ge:
                if (!pop(&y) || !pop(&x))
                    return std::nullopt;
                st.push_back(a == DW_OP_plus ? x + y : a == DW_OP_minus ? x - y : a == DW_OP_and ? x & y
                             : a == DW_OP_shl ? (y < 64 ? x << y : 0) : static_cast<int64_t>(x) >= static_cast<int64_t>(y));
                break;
            case DW_OP_stack_value:
                if (is_value)
                    *is_value = true;
                break;
            default:
                return std::nullopt;
            }
        }
    }
    if (st.empty())
        return std::nullopt;
    return st.back();
}

// A register's rule in a frame: the same value, undefined, or an expression (its address, or its value).
struct RegRule {
    bool same = false, undefined = false;
    std::vector<Dwarf_Op> ops;
};

RegRule register_rule(Dwarf_Frame* frame, int r)
{
    Dwarf_Op mem_ops[3];
    Dwarf_Op* ops = nullptr;
    size_t n = 0;
    RegRule rule;
    if (dwarf_frame_register(frame, r, mem_ops, &ops, &n) != 0)
        rule.undefined = true;
    else if (n == 0) // same value (ops null), or undefined
        (ops == nullptr ? rule.same : rule.undefined) = true;
    else
        rule.ops.assign(ops, ops + n);
    return rule;
}

// A register of the caller, by the frame's rule: nullopt where it cannot be recovered (or the copy lacks it).
std::optional<uint64_t> caller_register(const RegRule& rule, int r, const Regs& regs, uint64_t cfa, const Memory& mem)
{
    if (rule.same)
        return regs.known[r] ? std::optional<uint64_t>(regs.value[r]) : std::nullopt;
    if (rule.undefined)
        return std::nullopt;
    bool is_value = false;
    auto v = evaluate(rule.ops.data(), rule.ops.size(), regs, cfa, mem, &is_value);
    if (!v || is_value)
        return v;
    return mem.word(*v);
}

} // namespace

// One pc's rules, copied out of libdw's frame: a walk meets the same call sites over and over, and computing a
// frame (finding the FDE, running its CIE's and its own instructions) was most of the walk's time.
struct CfiUnwinder::Rules {
    bool found = false, signal = false;
    std::vector<Dwarf_Op> cfa; // empty: unknown
    RegRule ra, bp;
};

const CfiUnwinder::Rules& CfiUnwinder::rules(const CfiFile* f, uint64_t vaddr, bool keep)
{
    auto key = std::make_pair(f, vaddr);
    if (auto it = rules_.find(key); it != rules_.end())
        return it->second;
    if (keep && rules_.size() >= kRulesKept) // bounded, started over
        rules_.clear();
    Rules r;
    Dwarf_Frame* frame = nullptr;
    if (f->cfi() && dwarf_cfi_addrframe(f->cfi(), vaddr, &frame) == 0 && frame) {
        r.found = true;
        dwarf_frame_info(frame, nullptr, nullptr, &r.signal);
        Dwarf_Op* ops = nullptr;
        size_t n = 0;
        if (dwarf_frame_cfa(frame, &ops, &n) == 0 && n)
            r.cfa.assign(ops, ops + n);
        r.ra = register_rule(frame, kRip);
        r.bp = register_rule(frame, kRbp);
        free(frame);
    }
    if (!keep) {
        leaf_ = std::make_unique<Rules>(std::move(r));
        return *leaf_;
    }
    return rules_.emplace(key, std::move(r)).first->second;
}

CfiUnwinder::CfiUnwinder() = default;
CfiUnwinder::~CfiUnwinder() = default;

const CfiFile* CfiUnwinder::file(const CodePlace& place)
{
    auto it = files_.find(place.file);
    if (it == files_.end())
        it = files_.emplace(place.file, std::make_unique<CfiFile>(place.path, place.file)).first;
    return it->second.get();
}

std::vector<uint64_t> CfiUnwinder::callers(const StackCopy& stack, size_t max, const Locate& locate)
{
    std::vector<uint64_t> out;
    walk(stack, max, locate, [&](uint64_t ra) {
        out.push_back(ra);
        return true;
    });
    return out;
}

void CfiUnwinder::walk(const StackCopy& stack, size_t max, const Locate& locate,
                       const std::function<bool(uint64_t)>& visit)
{
    if (max == 0)
        return;
    Memory mem{stack};
    Regs regs;
    regs.set(kRip, stack.ip);
    regs.set(kRsp, stack.sp);
    regs.set(kRbp, stack.bp);
    for (size_t depth = 0;; depth++) {
        uint64_t pc = regs.value[kRip];
        // A return address is the instruction after the call: its frame's rules are the call's, one byte before.
        uint64_t lookup = depth == 0 ? pc : pc - 1;
        auto place = locate(lookup);
        const CfiFile* f = place ? file(*place) : nullptr;
        if (!f)
            break;
        // A word the rules pointed at that follows no call is not a return address (rules exact only at call
        // sites, a stale slot): the walk ends rather than name it.
        if (depth > 0 && !f->follows_call(place->file_offset + 1))
            break;
        auto vaddr = f->cfi() ? f->vaddr_of(place->file_offset) : std::nullopt;
        // The leaf's rules are not kept: leaves vary with every instruction sampled, callers are the same call
        // sites over and over.
        const Rules* r = vaddr ? &rules(f, *vaddr, depth > 0) : nullptr;
        // A signal frame (the trampoline a handler returns to) is no caller, and its own caller is the
        // interrupted code, at an exact pc that no call precedes: the walk ends before either is named.
        if (r && r->signal)
            break;
        if (depth > 0 && (!visit(pc) || depth == max))
            break;
        if (!r || !r->found)
            break;
        const Rules& rr = *r;
        std::optional<uint64_t> cfa;
        if (!rr.cfa.empty())
            cfa = evaluate(rr.cfa.data(), rr.cfa.size(), regs, std::nullopt, mem, nullptr);
        std::optional<uint64_t> ra, bp;
        if (cfa) {
            ra = caller_register(rr.ra, kRip, regs, *cfa, mem);
            bp = caller_register(rr.bp, kRbp, regs, *cfa, mem);
        }
        // The outermost frame's return address is undefined; a stack that does not grow back up is not a stack.
        if (!cfa || !ra || *ra == 0 || *cfa <= regs.value[kRsp])
            break;
        Regs caller;
        caller.set(kRip, *ra);
        caller.set(kRsp, *cfa);
        if (bp)
            caller.set(kRbp, *bp);
        regs = caller;
    }
}

} // namespace lotus::elf
