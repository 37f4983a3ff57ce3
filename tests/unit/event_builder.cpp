#include "event_builder.h"

#include <cstring>

namespace lotus::test {

static lotus_event_header header(uint32_t type, uint32_t tgid, uint32_t tid, uint64_t ts)
{
    return lotus_event_header{type, tgid, tid, 0, ts};
}

void EventBuilder::code(uint32_t tgid, uint64_t code, const std::string& name, const std::string& file, bool own)
{
    lotus_code_info c{};
    c.h = header(LOTUS_EV_CODE, tgid, tgid, 0);
    c.code = code;
    c.own_space = own;
    strncpy(c.name, name.c_str(), sizeof(c.name) - 1);
    strncpy(c.file, file.c_str(), sizeof(c.file) - 1);
    engine_.consume(&c, sizeof(c));
}

void EventBuilder::type(uint32_t tgid, uint64_t type, const std::string& name)
{
    lotus_type_info t{};
    t.h = header(LOTUS_EV_TYPE, tgid, tgid, 0);
    t.type = type;
    strncpy(t.name, name.c_str(), sizeof(t.name) - 1);
    engine_.consume(&t, sizeof(t));
}

void EventBuilder::entry(uint32_t tgid, uint32_t tid, uint64_t ts, uint32_t depth, uint64_t code,
                         uint64_t self_type, std::vector<std::pair<uint64_t, int64_t>> chain,
                         std::vector<std::tuple<uint64_t, uint8_t, int64_t>> captures)
{
    lotus_py_entry e{};
    e.h = header(LOTUS_EV_PY_ENTRY, tgid, tid, ts);
    e.code = code;
    e.self_type = self_type;
    e.depth = depth;
    for (size_t i = 0; i < chain.size() && i < LOTUS_CHAIN_LEN; i++) {
        e.chain_code[i] = chain[i].first;
        e.chain_arg1[i] = chain[i].second;
        e.chain_len = static_cast<uint32_t>(i + 1);
    }
    for (size_t i = 0; i < captures.size() && i < LOTUS_MAX_CAPTURES; i++) {
        e.capture_code[i] = std::get<0>(captures[i]);
        e.capture_slot[i] = std::get<1>(captures[i]);
        e.capture_value[i] = std::get<2>(captures[i]);
        e.capture_count = static_cast<uint32_t>(i + 1);
    }
    engine_.consume(&e, sizeof(e));
}

void EventBuilder::ret(uint32_t tgid, uint32_t tid, uint64_t ts, uint32_t depth)
{
    lotus_py_return r{};
    r.h = header(LOTUS_EV_PY_RETURN, tgid, tid, ts);
    r.depth = depth;
    engine_.consume(&r, sizeof(r));
}

void EventBuilder::proc(uint32_t type, uint32_t tgid, uint32_t parent, uint32_t space)
{
    lotus_proc_event p{};
    p.h = header(type, tgid, tgid, 0);
    p.parent_tgid = parent;
    p.space = space;
    engine_.consume(&p, sizeof(p));
}

} // namespace lotus::test
