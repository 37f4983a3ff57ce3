// The engine's descriptions: code objects and types as the stream describes them, their roles (told back to
// capture) and their names.
#include "engine.h"
#include "engine_records.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace lotus::model {

void Engine::on_code(const lotus_code_info& c)
{
    CodeInfo info{decode(c.name, sizeof(c.name), c.name_kind), decode(c.file, sizeof(c.file), c.file_kind),
                  c.firstlineno};
    CodeRole r = rules_.classify(info);
    bool own = c.own_space != 0;
    if (requests_)
        requests_->code_role(c.h.tgid, own ? c.h.tgid | LOTUS_SPACE_OWN : spaces_.space_of(c.h.tgid), c.code, c.fingerprint, r);
    spaces_.add_code(c.h.tgid, c.code, CodeDesc{std::move(info), std::move(r)}, own);
    last_code_ = {c.h.tgid, c.code, own};
}

// Slots capture read from the target for the locals a role captures: kept with the role, to check that a
// captured value came from the named local.
void Engine::on_slots(const RecordSlots& r)
{
    bool own = last_code_.tgid == r.tgid && last_code_.code == r.code && last_code_.own;
    auto* d = spaces_.code(r.tgid, r.code, own);
    if (!d)
        return;
    size_t n = std::min(d->role.capture_locals.size(), sizeof(r.slots));
    d->role.capture_slots.assign(r.slots, r.slots + n);
}

void Engine::on_type(const lotus_type_info& t)
{
    // A name neither BPF nor capture could read: judged by a guess, a pipeline's subclass could be taken for
    // something else. Left undescribed, BPF keeps emitting its objects' calls and the code's roles decide.
    if (t.unread)
        return;
    TypeDesc d;
    d.name = decode(t.name, sizeof(t.name), 0);
    std::vector<std::string> bases;
    for (const auto& b : t.bases)
        bases.push_back(decode(b, sizeof(b), 0));
    d.role = rules_.classify_type(d.name, bases);
    bool own = t.own_space != 0;
    if (requests_)
        requests_->type_role(own ? t.h.tgid | LOTUS_SPACE_OWN : spaces_.space_of(t.h.tgid), t.type, t.fingerprint, d.role.flags);
    spaces_.add_type(t.h.tgid, t.type, std::move(d), own);
}

const CodeInfo* Engine::code_info(uint32_t tgid, uint64_t code, bool own)
{
    if (auto* slot = slot_code(code))
        return &slot->info;
    auto* d = spaces_.code(tgid, code, own);
    return d ? &d->info : nullptr;
}

const CodeRole* Engine::role(uint32_t tgid, uint64_t code, bool own)
{
    if (auto* slot = slot_code(code))
        return &slot->role;
    auto* d = spaces_.code(tgid, code, own);
    return d ? &d->role : nullptr;
}

const TypeDesc* Engine::type_desc(uint32_t tgid, uint64_t type, bool own) const
{
    return spaces_.type(tgid, type, own);
}

std::string Engine::type_name(uint32_t tgid, uint64_t type, bool own)
{
    auto* t = spaces_.type(tgid, type, own);
    return t ? t->name : std::string();
}

} // namespace lotus::model
