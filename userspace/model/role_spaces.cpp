#include "role_spaces.h"

namespace lotus::model {

uint32_t RoleSpaces::space_of(uint32_t tgid) const
{
    auto it = space_of_.find(tgid);
    return it == space_of_.end() ? tgid : it->second;
}

void RoleSpaces::join(uint32_t pid, uint32_t space)
{
    if (space_of_.count(pid) || space != pid) // (else its implicit membership of its own space is counted now)
        leave(pid);
    space_of_[pid] = space;
    spaces_[space].members++;
}

void RoleSpaces::leave(uint32_t pid)
{
    own_.erase(pid);
    own_types_.erase(pid);
    auto it = space_of_.find(pid);
    // A process that never joined a space is the only member of its own: whoever forks from it makes it join.
    bool implicit = it == space_of_.end();
    uint32_t space = implicit ? pid : it->second;
    if (!implicit)
        space_of_.erase(it);
    auto sp = spaces_.find(space);
    if (sp != spaces_.end() && (implicit ? sp->second.members == 0 : --sp->second.members == 0))
        spaces_.erase(sp);
}

void RoleSpaces::forked(uint32_t child, uint32_t parent, uint32_t space)
{
    if (!space_of_.count(parent)) // its space now has two members: count them
        join(parent, parent);
    join(child, space ? space : space_of(parent));
}

void RoleSpaces::execed(uint32_t pid, uint32_t space) { join(pid, space ? space : next_unnumbered_--); }

void RoleSpaces::exited(uint32_t pid) { leave(pid); }

// Stores a description in the process's own map or in its space's (space_map(): only looked up then), where
// the process's own one is then stale.
template <typename Desc, typename Own, typename SpaceMap>
static void store(Own& own_map, uint32_t tgid, uint64_t ptr, Desc d, bool own, SpaceMap space_map)
{
    if (own) {
        own_map[tgid][ptr] = std::move(d);
        return;
    }
    space_map()[ptr] = std::move(d);
    if (auto mine = own_map.find(tgid); mine != own_map.end()) // the space's description is this process's now
        mine->second.erase(ptr);
}

void RoleSpaces::add_code(uint32_t tgid, uint64_t code, CodeDesc d, bool own)
{
    store(own_, tgid, code, std::move(d), own, [&]() -> auto& { return spaces_[space_of(tgid)].codes; });
}

void RoleSpaces::add_type(uint32_t tgid, uint64_t type, TypeDesc d, bool own)
{
    store(own_types_, tgid, type, std::move(d), own, [&]() -> auto& { return spaces_[space_of(tgid)].types; });
}

template <typename Desc, typename Own, typename Field>
static const Desc* find(const Own& own_map, const std::unordered_map<uint32_t, Field>& spaces, uint32_t tgid,
                        uint32_t space, uint64_t ptr, bool own, const std::unordered_map<uint64_t, Desc> Field::*field)
{
    if (own) {
        auto mine = own_map.find(tgid);
        if (mine == own_map.end())
            return nullptr;
        auto it = mine->second.find(ptr);
        return it == mine->second.end() ? nullptr : &it->second;
    }
    auto sp = spaces.find(space);
    if (sp == spaces.end())
        return nullptr;
    auto it = (sp->second.*field).find(ptr);
    return it == (sp->second.*field).end() ? nullptr : &it->second;
}

const CodeDesc* RoleSpaces::code(uint32_t tgid, uint64_t code, bool own) const
{
    return find(own_, spaces_, tgid, space_of(tgid), code, own, &Space::codes);
}

const TypeDesc* RoleSpaces::type(uint32_t tgid, uint64_t type, bool own) const
{
    return find(own_types_, spaces_, tgid, space_of(tgid), type, own, &Space::types);
}

} // namespace lotus::model
