// A sampled thread's callers, from a copy of its user stack and the call-frame information (.eh_frame) of the
// files its code is in, as perf record --call-graph dwarf or a debugger finds them: no frame pointers needed.
// x86-64. Only reads the copy it is given, never the process.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/file_id.h"

namespace lotus::elf {

struct StackCopy {
    uint64_t ip = 0, sp = 0, bp = 0; // the interrupted frame's rip, rsp and rbp
    const uint8_t* bytes = nullptr;  // the stack from sp on
    size_t len = 0;
};

// Where code is: the file it is mapped from (a path that opens it now, and which file that is), and the offset in
// that file.
struct CodePlace {
    std::string path;
    common::FileId file;
    uint64_t file_offset = 0;
};

class CfiFile;

class CfiUnwinder {
public:
    using Locate = std::function<std::optional<CodePlace>(uint64_t ip)>;
    CfiUnwinder();
    ~CfiUnwinder();
    CfiUnwinder(const CfiUnwinder&) = delete;
    CfiUnwinder& operator=(const CfiUnwinder&) = delete;

    // The return addresses of the leaf's callers, innermost first, at most max. The walk ends where an address is
    // in no file, its file has no CFI for it, or a rule wants a register or stack word the copy does not hold.
    std::vector<uint64_t> callers(const StackCopy& stack, size_t max, const Locate& locate);
    // The same, each return address handed to `visit` as it is found, until it returns false.
    void walk(const StackCopy& stack, size_t max, const Locate& locate, const std::function<bool(uint64_t)>& visit);
    size_t files() const { return files_.size(); }

private:
    struct Rules;
    const CfiFile* file(const CodePlace& place);
    // A pc's rules; kept (bounded) where `keep`, else valid until the next call that does not keep them.
    const Rules& rules(const CfiFile* f, uint64_t vaddr, bool keep);
    static constexpr size_t kRulesKept = 1 << 16;
    std::map<std::pair<const CfiFile*, uint64_t>, Rules> rules_; // by file and address
    std::unique_ptr<Rules> leaf_;
    // By identity, not path: a path can come to name another file. One that was not that file when opened, or
    // is not ELF, has no CFI.
    std::map<common::FileId, std::unique_ptr<CfiFile>> files_;
};

} // namespace lotus::elf
