#include "event_builder.h"

#include "model/user_records.h"

#include <fmt/format.h>

#include <algorithm>
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
    auto pending = std::move(resolved);
    resolved.clear();
    for (const auto& [t, code_obj, s] : pending)
        slots(t, code_obj, s);
}

void EventBuilder::slots(uint32_t tgid, uint64_t code, const std::vector<uint8_t>& slots)
{
    model::RecordSlots r{};
    r.type = model::kRecordSlots;
    r.tgid = r.tid = tgid;
    r.code = code;
    memset(r.slots, LOTUS_NO_SLOT, sizeof(r.slots));
    memcpy(r.slots, slots.data(), std::min(slots.size(), sizeof(r.slots)));
    engine_.consume(&r, sizeof(r));
}

void EventBuilder::type(uint32_t tgid, uint64_t type, const std::string& name, std::vector<std::string> bases,
                        bool own)
{
    lotus_type_info t{};
    t.h = header(LOTUS_EV_TYPE, tgid, tgid, 0);
    t.type = type;
    t.own_space = own;
    strncpy(t.name, name.c_str(), sizeof(t.name) - 1);
    for (size_t i = 0; i < bases.size() && i < LOTUS_BASES; i++)
        strncpy(t.bases[i], bases[i].c_str(), LOTUS_BASE_LEN - 1);
    engine_.consume(&t, sizeof(t));
}

void EventBuilder::entry(uint32_t tgid, uint32_t tid, uint64_t ts, uint32_t depth, uint64_t code,
                         uint64_t self_type, std::vector<std::pair<uint64_t, int64_t>> chain,
                         std::vector<std::tuple<uint64_t, uint8_t, int64_t>> captures, uint64_t self_obj,
                         uint64_t arg1_obj, uint16_t own)
{
    lotus_py_entry e{};
    e.h = header(LOTUS_EV_PY_ENTRY, tgid, tid, ts);
    e.code = code;
    e.self_type = self_type;
    e.self_obj = self_obj;
    e.arg1_obj = arg1_obj;
    e.own = own;
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

void EventBuilder::ret(uint32_t tgid, uint32_t tid, uint64_t ts, uint32_t depth, uint64_t ret_obj)
{
    lotus_py_return r{};
    r.h = header(LOTUS_EV_PY_RETURN, tgid, tid, ts);
    r.depth = depth;
    r.ret_obj = ret_obj;
    r.ret_null = ret_obj == 0;
    engine_.consume(&r, sizeof(r));
}

void EventBuilder::msg(uint32_t tgid, uint32_t tid, uint64_t ts, uint8_t dir, const std::string& pickle, uint64_t file,
                       uint16_t mode)
{
    lotus_msg m{};
    m.h = header(LOTUS_EV_MSG, tgid, tid, ts);
    m.file = file;
    m.mode = mode;
    m.dir = dir;
    m.len = static_cast<uint32_t>(pickle.size());
    m.nbytes = static_cast<uint8_t>(std::min(pickle.size(), sizeof(m.data)));
    memcpy(m.data, pickle.data(), m.nbytes);
    engine_.consume(&m, sizeof(m));
}

void EventBuilder::getppid(uint32_t tgid, uint32_t tid, uint64_t ts)
{
    lotus_event_header h = header(LOTUS_EV_GETPPID, tgid, tid, ts);
    engine_.consume(&h, sizeof(h));
}

void EventBuilder::thread_name(uint32_t tgid, uint32_t tid, uint64_t ts, const std::string& name)
{
    lotus_thread_name t{};
    t.h = header(LOTUS_EV_THREAD, tgid, tid, ts);
    name.copy(t.comm, sizeof(t.comm) - 1);
    engine_.consume(&t, sizeof(t));
}

void add_workers(std::map<uint32_t, model::ProcessInfo>& processes, uint32_t owner, std::vector<uint32_t> pids,
                 uint64_t batches, uint64_t busy_ns, int loader)
{
    for (size_t i = 0; i < pids.size(); i++) {
        auto& p = processes[pids[i]];
        p.owner = owner;
        p.worker = true;
        p.worker_id = static_cast<int>(i);
        p.loader = loader;
        p.batches = batches;
        p.first_ns = 0;
        p.last_ns = 1'000'000'000;
        p.busy_ns = busy_ns;
    }
}

static std::string framed(const std::string& body)
{
    std::string p = "\x80\x04\x95";
    uint64_t n = body.size();
    p.append(reinterpret_cast<const char*>(&n), 8);
    return p + body;
}

static std::string worker_global(const std::string& name)
{
    std::string module = "torch.utils.data._utils.worker";
    return std::string("\x8c") + char(module.size()) + module + "\x94\x8c" + char(name.size()) + name + "\x94\x93\x94";
}

std::string pickled_indexed(int64_t index, bool stop)
{
    std::string idx;
    if (index < 256) {
        idx = std::string("K") + char(index);
    } else if (index < 65536) {
        idx = std::string("M") + char(index & 0xff) + char(index >> 8);
    } else {
        int32_t v = static_cast<int32_t>(index);
        idx = "J" + std::string(reinterpret_cast<const char*>(&v), 4);
    }
    std::string rest = stop ? worker_global("_IterableDatasetStopIteration") + ")\x81\x94}" : "]\x94(K\x01K\x02e\x86\x94.";
    return framed(idx + rest);
}

std::string pickled_resume() { return framed(worker_global("_ResumeIteration") + ")\x81\x94}\x94\x8c\x04seed"); }

void EventBuilder::proc(uint32_t type, uint32_t tgid, uint32_t parent, uint32_t space)
{
    lotus_proc_event p{};
    p.h = header(type, tgid, tgid, 0);
    p.parent_tgid = parent;
    p.space = space;
    engine_.consume(&p, sizeof(p));
}

std::vector<model::Span> spans_of(const std::vector<model::Span>& spans, model::SpanKind kind)
{
    std::vector<model::Span> out;
    for (const auto& s : spans)
        if (s.kind == kind)
            out.push_back(s);
    return out;
}

std::string arg_text(const model::Span& s, const std::string& key)
{
    for (const auto& [k, v] : s.args) {
        if (k != key)
            continue;
        if (auto* i = std::get_if<int64_t>(&v))
            return std::to_string(*i);
        if (auto* b = std::get_if<bool>(&v))
            return *b ? "true" : "false";
        if (auto* d = std::get_if<model::DurationNs>(&v))
            return fmt::format("{:.3f}", static_cast<double>(d->ns) / 1e6);
        return std::get<std::string>(v);
    }
    return "";
}

int64_t arg_ns(const model::Span& s, const std::string& key)
{
    for (const auto& [k, v] : s.args)
        if (auto* d = std::get_if<model::DurationNs>(&v); k == key && d)
            return static_cast<int64_t>(d->ns);
    return -1;
}

} // namespace lotus::test
