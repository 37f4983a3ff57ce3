#include "capture/role_writer.h"

#include <algorithm>
#include <cstring>

#include "capture/probe.h"
#include "cpython/remote_memory.h"

namespace lotus::capture {

namespace {

// Slots of named locals of a code object, read from its co_localsplusnames in the first process of `pids` that
// can be read.
std::vector<uint8_t> resolve_locals(const std::vector<uint32_t>& pids, uint64_t code,
                                    const std::vector<std::string>& wanted, const lotus_py_layout& layout)
{
    std::optional<std::vector<std::string>> names;
    for (uint32_t pid : pids)
        if (!names)
            names = cpython::read_local_names(cpython::ProcessMemory(static_cast<int>(pid)), code, layout);
    std::vector<uint8_t> slots;
    for (const auto& w : wanted) {
        uint8_t slot = LOTUS_NO_SLOT;
        for (size_t i = 0; names && i < names->size() && i < 64; i++)
            if ((*names)[i] == w)
                slot = static_cast<uint8_t>(i);
        slots.push_back(slot);
    }
    return slots;
}

} // namespace

void RoleWriter::code_role(uint32_t tgid, uint32_t space, uint64_t code, uint64_t fingerprint,
                           const model::CodeRole& r)
{
    std::vector<uint8_t> slots;
    if (!r.capture_locals.empty()) {
        slots = resolve_locals(tree_.lineage(tgid), code, r.capture_locals, layout_);
        model::RecordSlots rs{model::kRecordSlots, tgid, 0, 0, 0, code, {}};
        memset(rs.slots, LOTUS_NO_SLOT, sizeof(rs.slots));
        memcpy(rs.slots, slots.data(), std::min(slots.size(), sizeof(rs.slots)));
        slots_.push_back(rs);
    }
    probe_.set_role(space, code, fingerprint, r.flags, slots);
}

void RoleWriter::type_role(uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags)
{
    probe_.set_type(space, type, fingerprint, flags);
}

std::vector<model::RecordSlots> RoleWriter::take() { return std::exchange(slots_, {}); }

} // namespace lotus::capture
