// What the engine knows of code objects and types, per role space (lotus_abi.h): a process and the children
// it forked share a memory image, so BPF describes an object once for all of them; exec starts a new space.
#pragma once
#include <utility>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "rules.h"

namespace lotus::model {

struct CodeDesc {
    CodeInfo info;
    CodeRole role;
};

struct TypeDesc {
    std::string name; // tp_name
    TypeRole role;
};

class RoleSpaces {
public:
    // A process never seen joining a space is in its own, numbered by its pid (as BPF numbers those).
    uint32_t space_of(uint32_t tgid) const;
    void forked(uint32_t child, uint32_t parent, uint32_t space); // space 0 (ABI 2 files): the parent's
    void execed(uint32_t pid, uint32_t space);                    // space 0 (ABI 2 files): a new one
    void exited(uint32_t pid);                                    // a space no process is in is forgotten

    // own: described for tgid alone (its object differs from the one its space has at that address).
    void add_code(uint32_t tgid, uint64_t code, CodeDesc d, bool own);
    void add_type(uint32_t tgid, uint64_t type, TypeDesc d, bool own = false);
    // own: the process's own description (BPF says in each entry record which it went by), else its space's.
    const CodeDesc* code(uint32_t tgid, uint64_t code, bool own = false) const;
    CodeDesc* code(uint32_t tgid, uint64_t code, bool own = false)
    {
        return const_cast<CodeDesc*>(std::as_const(*this).code(tgid, code, own));
    }
    const TypeDesc* type(uint32_t tgid, uint64_t type, bool own = false) const;
    size_t spaces() const { return spaces_.size(); }

private:
    struct Space {
        std::unordered_map<uint64_t, CodeDesc> codes;
        std::unordered_map<uint64_t, TypeDesc> types;
        uint32_t members = 0;
    };
    void join(uint32_t pid, uint32_t space);
    void leave(uint32_t pid);

    std::unordered_map<uint32_t, uint32_t> space_of_; // pid -> space, for processes that joined one
    std::unordered_map<uint32_t, Space> spaces_;
    std::unordered_map<uint32_t, std::unordered_map<uint64_t, CodeDesc>> own_; // per process, looked up first
    std::unordered_map<uint32_t, std::unordered_map<uint64_t, TypeDesc>> own_types_;
    uint32_t next_unnumbered_ = 0xffffffff; // spaces of EXEC records that name none (counting down)
};

} // namespace lotus::model
