#include "engine.h"

#include "common/utf8.h"
#include "process_fold.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace lotus::model {

namespace {

std::string decode(const char* buf, size_t cap, uint8_t kind)
{
    if (kind != 0 && kind != 1 && kind != 2 && kind != 4)
        return "?"; // unreadable (0xff), or a corrupt record
    // Bytes (paths, UTF-8 names): valid sequences kept, others replaced, so outputs stay valid UTF-8 JSON.
    if (kind == 0)
        return common::valid_utf8(std::string_view(buf, strnlen(buf, cap)));
    // A non-ASCII compact str: its code points (Latin-1, UCS-2 or UCS-4 units), encoded as UTF-8.
    std::string out;
    for (size_t i = 0; i + kind <= cap; i += kind) {
        uint32_t cp = 0;
        memcpy(&cp, buf + i, kind);
        if (cp == 0)
            break;
        common::append_code_point(out, cp);
    }
    return out;
}

template <typename T>
const T* as(const void* data, size_t len)
{
    return len >= sizeof(T) ? static_cast<const T*>(data) : nullptr;
}

} // namespace

Engine::Engine(const Rules& rules, SpanSink spans, RoleSink roles, TypeSink types)
    : rules_(rules),
      span_sink_([this, sink = std::move(spans)](const Span& s) {
          native_map_.span(s);
          if (s.kind != SpanKind::Native) {
              auto& first = process(s.pid).first_span_ns;
              first = first ? std::min(first, s.start_ns) : s.start_ns;
          }
          if (sink)
              sink(s);
      }),
      role_sink_(std::move(roles)),
      type_sink_(std::move(types))
{
    span_calls_.resize(rules.spans().size());
    anonymous_id_ = native_map_.function_id("[unknown]", "[anonymous]");
    no_stack_id_ = native_map_.function_id("[unknown]", "[no user stack]");
    // A batch's last implicit sample is complete once the batch ends: it belongs to that batch.
    batches_.set_batch_ending([this](uint32_t tid) { close_samples(tid); });
}

ProcessInfo& Engine::process(uint32_t pid)
{
    auto& p = processes_[pid];
    p.pid = pid;
    return p;
}

void Engine::add_process(uint32_t pid, uint32_t parent, bool root)
{
    auto& p = process(pid);
    p.parent = parent;
    p.root = root;
    p.preexisting = !root;
}

void Engine::consume(const void* data, size_t len)
{
    counters_.events++;
    auto* h = as<lotus_event_header>(data, len);
    if (!h) {
        counters_.malformed++;
        return;
    }
    if (h->type == LOTUS_EV_PY_ENTRY || h->type == LOTUS_EV_PY_RETURN || h->type == LOTUS_EV_MSG) {
        auto& p = process(h->tgid);
        if (!p.first_ns)
            p.first_ns = h->ts_ns;
        p.last_ns = std::max<uint64_t>(p.last_ns, h->ts_ns);
    }
    switch (h->type) {
    case LOTUS_EV_PY_ENTRY:
        if (auto* e = as<lotus_py_entry>(data, len))
            return on_entry(*e);
        break;
    case LOTUS_EV_PY_RETURN:
        if (auto* r = as<lotus_py_return>(data, len))
            return on_return(*r);
        break;
    case LOTUS_EV_CODE:
        if (auto* c = as<lotus_code_info>(data, len))
            return on_code(*c);
        break;
    case LOTUS_EV_TYPE:
        if (auto* t = as<lotus_type_info>(data, len))
            return on_type(*t);
        break;
    case LOTUS_EV_MSG:
        if (auto* m = as<lotus_msg>(data, len))
            return batches_.message(*m);
        break;
    case LOTUS_EV_GETPPID:
        return batches_.getppid(h->tgid, h->tid, h->ts_ns);
    case LOTUS_EV_CAPTURE:
        if (auto* e = as<lotus_py_entry>(data, len))
            return captured(*e);
        break;
    case LOTUS_EV_THREAD:
        if (auto* t = as<lotus_thread_name>(data, len)) {
            process(t->h.tgid).thread_names[t->h.tid] = decode(t->comm, sizeof(t->comm), 0);
            return;
        }
        break;
    case LOTUS_EV_OPEN:
        if (auto* o = as<lotus_open>(data, len))
            return batches_.opened(o->h.tgid, o->h.tid, o->h.ts_ns, decode(o->path, sizeof(o->path), 0));
        break;
    case LOTUS_EV_NATIVE_ENTRY:
    case LOTUS_EV_NATIVE_RETURN:
        if (auto* n = as<lotus_native>(data, len))
            return on_native(*n);
        break;
    case LOTUS_EV_SAMPLE:
        if (auto* smp = as<lotus_sample>(data, len))
            return on_sample(*smp);
        break;
    case kRecordNativeFunc:
        if (auto* f = as<RecordNativeFunc>(data, len)) {
            std::string name = decode(f->name, sizeof(f->name), 0), library = decode(f->library, sizeof(f->library), 0);
            uint32_t id = native_map_.function_id(name, library);
            native_funcs_[f->func] = {std::move(name), std::move(library), id};
            return;
        }
        break;
    case kRecordNativeLate:
        if (auto* r = as<RecordNativeLate>(data, len)) {
            native_late_.push_back({r->tgid, decode(r->library, sizeof(r->library), 0), r->loaded_ns, r->ts_ns});
            return;
        }
        break;
    case kRecordOtherInterpreter:
        if (auto* r = as<RecordOtherInterpreter>(data, len)) {
            other_interpreters_.push_back({r->tgid, decode(r->path, sizeof(r->path), 0)});
            return;
        }
        break;
    case kRecordUntracedPython:
        if (auto* r = as<RecordUntracedPython>(data, len)) {
            untraced_pythons_.push_back({r->tgid, decode(r->comm, sizeof(r->comm), 0), decode(r->path, sizeof(r->path), 0)});
            return;
        }
        break;
    case kRecordRank:
        if (auto* r = as<RecordRank>(data, len)) {
            process(r->tgid).env_rank = r->rank;
            return;
        }
        break;
    case kRecordSymbol:
        if (auto* r = as<RecordSymbol>(data, len))
            return on_symbol(r->tgid, r->ip, r->ip + 1, r->name, r->library);
        break;
    case kRecordSymbolRange:
        if (auto* r = as<RecordSymbolRange>(data, len))
            return on_symbol(r->tgid, r->ip_lo, r->ip_hi, r->name, r->library);
        break;
    case kRecordSlots:
        if (auto* r = as<RecordSlots>(data, len))
            return on_slots(*r);
        break;
    case kRecordProcess:
        if (auto* r = as<RecordProcess>(data, len))
            return add_process(r->pid, r->parent, r->root != 0);
        break;
    case kRecordEnd:
        return; // the session's
    case LOTUS_EV_FORK:
    case LOTUS_EV_EXIT:
    case LOTUS_EV_EXEC:
        if (auto* p = as<lotus_proc_event>(data, len))
            return on_process(*p);
        break;
    }
    counters_.malformed++;
}

void Engine::on_code(const lotus_code_info& c)
{
    CodeInfo info{decode(c.name, sizeof(c.name), c.name_kind), decode(c.file, sizeof(c.file), c.file_kind),
                  c.firstlineno};
    CodeRole r = rules_.classify(info);
    bool own = c.own_space != 0;
    if (role_sink_)
        role_sink_(c.h.tgid, own ? c.h.tgid | LOTUS_SPACE_OWN : spaces_.space_of(c.h.tgid), c.code, r);
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
    if (type_sink_)
        type_sink_(own ? t.h.tgid | LOTUS_SPACE_OWN : spaces_.space_of(t.h.tgid), t.type, d.role.flags);
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

void Engine::on_process(const lotus_proc_event& p)
{
    uint32_t pid = p.h.tgid;
    switch (p.h.type) {
    case LOTUS_EV_FORK: {
        auto& info = process(pid);
        info.parent = p.parent_tgid;
        info.exited = false; // a pid used again: alive (never folded as the one that exited)
        info.exit_status = -1;
        info.exit_ns = 0;
        spaces_.forked(pid, p.parent_tgid, p.space); // same memory image: same objects at the same addresses
        batches_.forked(pid, p.parent_tgid);
        break;
    }
    case LOTUS_EV_EXEC:
        // A new program image: nothing known about the old one's objects holds for it.
        spaces_.execed(pid, p.space);
        symbols_.erase(pid);
        break;
    case LOTUS_EV_EXIT: {
        auto& info = process(pid);
        info.exited = true;
        info.exit_status = static_cast<int>(p.exit_code);
        info.exit_ns = p.h.ts_ns;
        for (auto it = thread_owner_.begin(); it != thread_owner_.end();) {
            if (it->second == pid) {
                close_samples(it->first);
                close_thread(it->first);
                release_held(it->first, true);
                implicit_.erase(it->first); // (closed above: nothing of the thread is left)
                it = thread_owner_.erase(it);
            } else {
                ++it;
            }
        }
        batches_.exited(pid);
        spaces_.exited(pid);
        symbols_.erase(pid);
        fold_exited(p.h.ts_ns);
        break;
    }
    }
}

void Engine::fold_exited(uint64_t now_ns)
{
    std::set<uint32_t> named; // in notes by pid: a library probed late, another interpreter
    for (const auto& l : native_late_)
        named.insert(l.pid);
    for (const auto& o : other_interpreters_)
        named.insert(o.pid);
    for (const auto& u : untraced_pythons_)
        named.insert(u.pid);
    for (auto [pid, into] : folds_due(processes_, now_ns, named)) {
        if (fold_sink_)
            fold_sink_(pid, into);
        absorb(processes_.at(into), processes_.at(pid));
        batches_.forget(pid);
        processes_.erase(pid);
    }
}

void Engine::close_thread(uint32_t tid)
{
    natives_.erase(tid);
    auto it = stacks_.find(tid);
    if (it == stacks_.end())
        return;
    while (!it->second.empty()) {
        counters_.incomplete++;
        discard(it->second);
    }
    stacks_.erase(it);
}

Engine::Open Engine::opened(OpenKind kind, const lotus_py_entry& e)
{
    Open o;
    o.kind = kind;
    o.depth = e.depth;
    o.start_ns = e.h.ts_ns;
    o.code = e.code;
    o.self_type = e.self_type;
    o.self_obj = e.self_obj;
    o.code_own = e.own & LOTUS_OWN_CODE;
    o.type_own = e.own & LOTUS_OWN_SELF_TYPE;
    return o;
}

// Locals captured from the frames above: a DataLoader worker's id, a rank.
void Engine::captured(const lotus_py_entry& e)
{
    for (uint32_t i = 0; i < e.capture_count && i < LOTUS_MAX_CAPTURES; i++) {
        const CodeRole* cr = role(e.h.tgid, e.capture_code[i], e.own & LOTUS_OWN_CAPTURE(i));
        if (!cr || e.capture_value[i] == LOTUS_NO_VALUE || cr->capture_slots.empty() ||
            cr->capture_slots[0] != e.capture_slot[i])
            continue;
        int v = static_cast<int>(e.capture_value[i]);
        if (cr->kind == CodeKind::WorkerLoop)
            process(e.h.tgid).worker_id = v;
        else if (cr->kind == CodeKind::RankMain)
            process(e.h.tgid).rank = v;
    }
}

// An entry one level below a sample or a container op (or their Inner frames): the level's own frame again
// (Inner), or one of its ops. Returns false when the stack's top is no such level.
bool Engine::enter_level(std::vector<Open>& stack, const lotus_py_entry& e, const CodeRole& r)
{
    if (stack.empty())
        return false;
    const Open& top = stack.back();
    bool level = top.kind == OpenKind::Sample || top.kind == OpenKind::Inner || (top.kind == OpenKind::Op && top.level);
    if (!level || top.depth + 1 != e.depth)
        return false;
    size_t at = stack.size() - 1;
    while (stack[at].kind == OpenKind::Inner && at > 0)
        at--;
    const Open& lvl = stack[at];
    const TypeDesc* td = type_desc(e.h.tgid, e.self_type, e.own & LOTUS_OWN_SELF_TYPE);
    bool pipeline_object = r.kind == CodeKind::ObjectCall && td && td->role.pipeline();
    if ((pipeline_object && e.self_obj == lvl.self_obj) || r.kind == CodeKind::Scope) {
        stack.push_back(opened(OpenKind::Inner, e));
        return true;
    }
    Open op = opened(OpenKind::Op, e);
    op.sample = lvl.sample;
    op.sample_id = lvl.sample_id;
    op.level = pipeline_object; // a container transform (or a nested Compose): its calls are ops too
    if (lvl.kind == OpenKind::Op)
        op.container = op_name(e.h.tgid, lvl);
    op.counters = e.counters;
    stack.push_back(std::move(op));
    return true;
}

// Two reads of a caller's first argument agree: equal, or one not read (read only while its code's role wants it,
// or is not known yet; a __getitem__'s, the dataset index, always is).
static bool args_agree(int64_t a, int64_t b)
{
    return a == LOTUS_NO_VALUE || b == LOTUS_NO_VALUE || a == b;
}

// The call is made from the frame that made the sample's first pipeline call, or from a __getitem__ among that
// frame's callers (a dataset's __getitem__ that called super().__getitem__, which called the pipeline): e's
// callers are the sample's from the k-th on, as far as both were read.
bool Engine::same_item(const Open& o, const lotus_py_entry& e)
{
    uint32_t n = std::min<uint32_t>(e.chain_len, LOTUS_CHAIN_LEN);
    if (n == 0)
        return false;
    const CodeRole* c0 = role(e.h.tgid, e.chain_code[0], e.own & LOTUS_OWN_CHAIN(0));
    for (size_t k = 0; k < o.item.size(); k++) {
        // A frame nearer the item's root is fewer calls deep; the same frame is as deep.
        if (k == 0 ? e.depth != o.depth : e.depth > o.depth || !c0 || c0->kind != CodeKind::GetItem)
            continue;
        bool match = true;
        for (size_t j = 0; j < n && k + j < o.item.size() && match; j++) {
            match = o.item[k + j].first == e.chain_code[j] && args_agree(o.item[k + j].second, e.chain_arg1[j]);
        }
        if (match)
            return true;
    }
    return false;
}

// The open call a pipeline call is made in, if it is one that can hold a sample's calls: an op (an object the
// item's __getitem__ called) or a --span call.
const Engine::Open* Engine::enclosing(const std::vector<Open>& stack)
{
    if (stack.empty() || (stack.back().kind != OpenKind::Op && stack.back().kind != OpenKind::Py))
        return nullptr;
    return &stack.back();
}

bool Engine::retry_of(const Open& o, const lotus_py_entry& e)
{
    uint32_t n = std::min<uint32_t>(e.chain_len, LOTUS_CHAIN_LEN);
    // The same callers with the same arguments: a retry for the same index, or the next item of that index (a
    // sampler drawing with replacement). Not told apart: the next item.
    bool identical = n == o.item.size();
    for (uint32_t i = 0; i < n && identical; i++)
        identical = o.item[i].first == e.chain_code[i] && o.item[i].second == e.chain_arg1[i];
    if (identical)
        return false;
    for (uint32_t j = 1; j < n; j++) {
        const CodeRole* cj = role(e.h.tgid, e.chain_code[j], e.own & LOTUS_OWN_CHAIN(j));
        if (!cj || cj->kind != CodeKind::GetItem)
            continue;
        for (size_t k = 1; k < o.item.size(); k++) {
            // (that __getitem__'s index read in both: an unread one tells no item from the next)
            bool match = o.item[k].second != LOTUS_NO_VALUE && e.chain_arg1[j] != LOTUS_NO_VALUE;
            for (uint32_t i = 0; j + i < n && k + i < o.item.size() && match; i++)
                match = o.item[k + i].first == e.chain_code[j + i] &&
                        args_agree(o.item[k + i].second, e.chain_arg1[j + i]);
            if (match)
                return true;
        }
    }
    return false;
}

void Engine::open_sample(std::vector<Open>& stack, const lotus_py_entry& e)
{
    pipeline_seen_ = true;
    // Another pipeline of the item whose sample just returned (its target_transform, say): the same sample again.
    // The same pipeline object called again is the next item's, whose index may be the same (a sampler drawing
    // with replacement), unless a call that enclosed the sample's is still open: an object of the item's that
    // calls pipelines (two views of an image, DINO's multi-crop, StandardTransform) has not returned yet.
    const Open* around = enclosing(stack);
    if (auto ret = returned_.find(e.h.tid); ret != returned_.end() && ret->second.open) {
        Open& o = ret->second.sample;
        bool inside = around && o.enclosed && around->start_ns == o.enclosing_start && around->depth == o.enclosing_depth;
        if (inside || (ret->second.raised && retry_of(o, e)) ||
            (same_item(o, e) && std::find(o.pipelines.begin(), o.pipelines.end(), e.self_obj) == o.pipelines.end())) {
            o.pipelines.push_back(e.self_obj);
            o.self_obj = e.self_obj; // (the level's object: its own frames below are Inner)
            o.code = e.code;
            stack.push_back(std::move(o));
            ret->second = Returned{};
            return;
        }
        close_returned(e.h.tid);
    }
    int64_t index = -1;
    bool item = false; // a dataset's item: called by a __getitem__
    for (uint32_t i = 0; i < e.chain_len && i < LOTUS_CHAIN_LEN; i++) {
        const CodeRole* cr = role(e.h.tgid, e.chain_code[i], e.own & LOTUS_OWN_CHAIN(i));
        if (cr && cr->kind == CodeKind::GetItem) {
            if (e.chain_arg1[i] != LOTUS_NO_VALUE)
                index = e.chain_arg1[i];
            item = true;
            break;
        }
    }
    // Calls __getitem__ made before its pipeline call (the loader's, while the interpreter had not specialised
    // them yet) are not an implicit sample: this is the sample.
    if (auto imp = implicit_.find(e.h.tid); imp != implicit_.end())
        imp->second = Implicit{};
    Open s = opened(OpenKind::Sample, e);
    s.sample = index;
    s.sample_id = ++sample_seq_;
    s.level = true;
    s.counters = e.counters;
    s.pipelines.push_back(e.self_obj);
    if (around) {
        s.enclosed = true;
        s.enclosing_start = around->start_ns;
        s.enclosing_depth = around->depth;
    }
    for (uint32_t i = 0; item && i < e.chain_len && i < LOTUS_CHAIN_LEN; i++)
        s.item.emplace_back(e.chain_code[i], e.chain_arg1[i]);
    batches_.sample_started(e.h.tgid, e.h.tid, e.h.ts_ns, sample_seq_, index);
    std::tie(s.owner, s.loader) = batches_.data_for(e.h.tgid, e.h.tid);
    stack.push_back(std::move(s));
}

void Engine::on_entry(const lotus_py_entry& e)
{
    counters_.entries++;
    thread_owner_[e.h.tid] = e.h.tgid;
    auto& stack = stacks_[e.h.tid];
    // Spans at this depth or deeper whose return never arrived (lost to a full ring buffer).
    while (!stack.empty() && stack.back().depth >= e.depth) {
        counters_.lost_returns++;
        discard(stack);
    }
    captured(e);
    const CodeRole* r = role(e.h.tgid, e.code, e.own & LOTUS_OWN_CODE);
    if (!r) {
        counters_.unknown_code++;
        return;
    }
    if (r->kind == CodeKind::Span) {
        stack.push_back(opened(OpenKind::Py, e));
        stack.back().span_rule = r->span_rule;
        return;
    }
    if (enter_level(stack, e, *r))
        return;
    bool in_sample = std::any_of(stack.begin(), stack.end(), [](const Open& o) { return o.kind == OpenKind::Sample; });
    const TypeDesc* td = type_desc(e.h.tgid, e.self_type, e.own & LOTUS_OWN_SELF_TYPE);
    bool pipeline_call = r->kind == CodeKind::ObjectCall && td && td->role.pipeline();
    auto chain_role = [&](uint32_t i) -> const CodeRole* {
        return i < e.chain_len && i < LOTUS_CHAIN_LEN ? role(e.h.tgid, e.chain_code[i], e.own & LOTUS_OWN_CHAIN(i))
                                                      : nullptr;
    };
    auto from_fetcher = [&] { // a dataset's __getitem__ called by a DataLoader fetcher, not any __getitem__
        for (uint32_t i = 1; i < LOTUS_CHAIN_LEN; i++)
            if (const CodeRole* ci = chain_role(i); ci && ci->kind == CodeKind::Fetcher)
                return true;
        return false;
    };
    if (const CodeRole* c0 = chain_role(0);
        c0 && c0->kind == CodeKind::GetItem && !pipeline_call && !r->internal && !in_sample && from_fetcher()) {
        if (auto ret = returned_.find(e.h.tid); ret != returned_.end() && ret->second.open) {
            // An object the __getitem__ that called a pipeline calls itself: an op of that sample.
            const Open& smp = ret->second.sample;
            if (same_item(smp, e)) {
                Open op = opened(OpenKind::Op, e);
                op.sample = smp.sample;
                op.sample_id = smp.sample_id;
                op.counters = e.counters;
                stack.push_back(std::move(op));
                return;
            }
            close_returned(e.h.tid);
        }
        auto& imp = implicit_[e.h.tid];
        int64_t index = e.chain_arg1[0] == LOTUS_NO_VALUE ? -1 : e.chain_arg1[0];
        if (!imp.open || imp.index != index) {
            close_implicit(e.h.tid);
            imp = Implicit{true, e.h.tgid, index, ++sample_seq_, e.h.ts_ns, e.h.ts_ns, {}};
        }
        Open op = opened(OpenKind::Op, e);
        op.sample = index;
        op.sample_id = imp.sample_id;
        op.counters = e.counters;
        stack.push_back(std::move(op));
        return;
    }
    switch (r->kind) {
    case CodeKind::LoaderIter:
        if (td && td->role.loader()) { // (3.10 names carry no class: the base iterator's __iter__ too)
            batches_.iter_begin(e.h.tgid, e.h.tid, e.self_obj);
            stack.push_back(opened(OpenKind::IterCall, e));
        }
        return;
    case CodeKind::IterInit:
        if (td && td->role.loader_iterator()) {
            batches_.init_begin(e.h.tgid, e.h.tid, e.self_obj, e.arg1_obj);
            stack.push_back(opened(OpenKind::IterInit, e));
        }
        return;
    case CodeKind::LoaderNext:
        if (td && td->role.loader_iterator()) {
            batches_.next_started(e.h.tgid, e.h.tid, e.h.ts_ns, e.self_obj, td->role.single_process);
            stack.push_back(opened(OpenKind::Next, e));
        }
        return;
    default:
        break;
    }
    // A pipeline object called (outside any sample: a pipeline used inside an op is part of that op).
    if (pipeline_call && !in_sample)
        open_sample(stack, e);
}

std::string Engine::op_name(uint32_t tgid, const Open& o)
{
    auto* c = code_info(tgid, o.code, o.code_own);
    std::string type = type_name(tgid, o.self_type, o.type_own);
    return rules_.op_name(c ? *c : CodeInfo{}, type.empty() ? nullptr : &type);
}

void Engine::on_return(const lotus_py_return& r)
{
    counters_.returns++;
    auto it = stacks_.find(r.h.tid);
    if (it == stacks_.end())
        return;
    auto& stack = it->second;
    while (!stack.empty() && stack.back().depth > r.depth) {
        counters_.lost_returns++;
        discard(stack);
    }
    if (stack.empty() || stack.back().depth != r.depth)
        return; // a frame we did not keep (not a sample or op)
    Open o = std::move(stack.back());
    stack.pop_back();
    finish_span(r, std::move(o), stack);
}

void Engine::finish_span(const lotus_py_return& r, Open o, std::vector<Open>& stack)
{
    switch (o.kind) {
    case OpenKind::Inner:
        return;
    case OpenKind::Next:
        close_samples(r.h.tid);
        batches_.next_finished(r.h.tgid, r.h.tid, o.start_ns, r.h.ts_ns, r.ret_null);
        return;
    case OpenKind::IterInit:
        batches_.init_end(r.h.tgid, r.h.tid, o.self_obj);
        return;
    case OpenKind::IterCall:
        batches_.iter_end(r.h.tgid, r.h.tid, r.ret_null ? 0 : r.ret_obj);
        return;
    case OpenKind::Py: {
        auto* c = code_info(r.h.tgid, o.code, o.code_own);
        if (o.span_rule >= 0) {
            span_calls_.resize(std::max(span_calls_.size(), rules_.spans().size()));
            if (static_cast<size_t>(o.span_rule) < span_calls_.size())
                span_calls_[static_cast<size_t>(o.span_rule)]++;
        }
        Span py = Span::make(SpanKind::Py, c ? c->name : "?", r.h.tgid, r.h.tid, o.start_ns, r.h.ts_ns);
        py.depth = o.depth;
        if (c)
            py.args.emplace_back("file", c->file + ":" + std::to_string(c->firstlineno));
        if (span_sink_)
            span_sink_(py);
        return;
    }
    case OpenKind::Sample:
        // Complete once its thread goes on to another item (close_returned).
        batches_.sample_finished(r.h.tgid, r.h.tid, r.h.ts_ns);
        returned_[r.h.tid] = Returned{true, r.h.tgid, std::move(o), r.h.ts_ns, r.counters, r.ret_null != 0};
        return;
    case OpenKind::Op:
        break;
    }
    Span s = closed_span(r.h.tgid, r.h.tid, o, r.h.ts_ns, r.counters);
    // Its sample is below it (an op is opened only inside one, or in a container op inside one), returned (an op
    // its __getitem__ called after the pipeline), or implicit.
    for (auto sm = stack.rbegin(); sm != stack.rend(); ++sm) {
        if (sm->kind == OpenKind::Sample && sm->sample_id == s.sample_id) {
            sm->ops.push_back(std::move(s));
            return;
        }
    }
    if (auto ret = returned_.find(r.h.tid); ret != returned_.end() && ret->second.open &&
                                            ret->second.sample.sample_id == s.sample_id) {
        ret->second.end_ns = s.end_ns;
        ret->second.end = r.counters;
        ret->second.sample.ops.push_back(std::move(s));
        batches_.sample_finished(r.h.tgid, r.h.tid, r.h.ts_ns);
        return;
    }
    if (auto imp = implicit_.find(r.h.tid); imp != implicit_.end() && imp->second.open &&
                                            imp->second.sample_id == s.sample_id) {
        imp->second.end_ns = s.end_ns;
        imp->second.ops.push_back(std::move(s));
    }
}

Span Engine::closed_span(uint32_t pid, uint32_t tid, Open& o, uint64_t end_ns, const lotus_counters& end)
{
    Span s = o.kind == OpenKind::Sample ? Span::make(SpanKind::Sample, "sample", pid, tid, o.start_ns, end_ns)
                                        : Span::make(SpanKind::Op, op_name(pid, o), pid, tid, o.start_ns, end_ns);
    s.sample = o.sample;
    s.sample_id = o.sample_id;
    s.depth = o.depth;
    s.container = std::move(o.container);
    auto delta = [](uint64_t a, uint64_t b) { return b > a ? b - a : 0; };
    s.has_counters = true;
    s.counters = Counters{delta(o.counters.cpu_ns, end.cpu_ns), delta(o.counters.min_flt, end.min_flt),
                          delta(o.counters.maj_flt, end.maj_flt), delta(o.counters.nvcsw, end.nvcsw),
                          delta(o.counters.nivcsw, end.nivcsw), {}};
    static_assert(kMaxPerfCounters == LOTUS_MAX_PERF);
    for (unsigned k = 0; k < kMaxPerfCounters; k++)
        s.counters.perf[k] = delta(o.counters.perf[k], end.perf[k]);
    return s;
}

void Engine::close_returned(uint32_t tid)
{
    auto it = returned_.find(tid);
    if (it == returned_.end() || !it->second.open)
        return;
    Returned ret = std::move(it->second);
    returned_.erase(it);
    Span s = closed_span(ret.pid, tid, ret.sample, ret.end_ns, ret.end);
    s.owner = ret.sample.owner;
    s.loader = ret.sample.loader;
    process(ret.pid).samples++;
    emit_sample(ret.pid, tid, std::move(ret.sample.ops), std::move(s));
}

void Engine::emit_sample(uint32_t pid, uint32_t tid, std::vector<Span> ops, Span sample)
{
    if (!sample.owner)
        std::tie(sample.owner, sample.loader) = batches_.data_for(pid, tid);
    const ProcessInfo& p = process(pid);
    bool wait = !sample.owner && p.preexisting && !p.consumer;
    if (!wait)
        release_held(tid, false);
    for (auto& op : ops) {
        op.owner = sample.owner;
        op.loader = sample.loader;
    }
    if (wait) {
        auto& held = held_[tid];
        for (auto& op : ops)
            held.push_back(std::move(op));
        held.push_back(std::move(sample));
        if (held.size() >= kMaxHeld)
            release_held(tid, true);
        return;
    }
    if (span_sink_) {
        for (const auto& op : ops)
            span_sink_(op);
        span_sink_(sample);
    }
}

// Held samples of a thread go out: with the training process and DataLoader now known for the thread, or (force)
// as they are.
void Engine::release_held(uint32_t tid, bool force)
{
    auto it = held_.find(tid);
    if (it == held_.end())
        return;
    std::vector<Span> held = std::move(it->second);
    held_.erase(it);
    if (held.empty())
        return;
    auto [owner, loader] = batches_.data_for(held.back().pid, tid);
    if (!owner && !force) {
        held_[tid] = std::move(held);
        return;
    }
    for (auto& s : held) {
        s.owner = owner;
        s.loader = loader;
        if (span_sink_)
            span_sink_(s);
    }
}

void Engine::on_native(const lotus_native& n)
{
    auto& stack = natives_[n.h.tid];
    if (n.h.type == LOTUS_EV_NATIVE_ENTRY) {
        thread_owner_[n.h.tid] = n.h.tgid;
        stack.push_back({n.func, n.h.ts_ns});
        return;
    }
    // The innermost open call of this function; calls above it lost their returns.
    auto it = std::find_if(stack.rbegin(), stack.rend(), [&](const OpenNative& o) { return o.func == n.func; });
    if (it == stack.rend()) {
        counters_.native_unmatched++;
        return;
    }
    OpenNative o = *it;
    stack.erase(std::prev(it.base()), stack.end());
    auto f = native_funcs_.find(o.func);
    Span s = Span::make(SpanKind::Native, f != native_funcs_.end() ? f->second.name : "native#" + std::to_string(o.func),
                        n.h.tgid, n.h.tid, o.start_ns, n.h.ts_ns);
    if (f != native_funcs_.end())
        s.args.emplace_back("library", f->second.library);
    counters_.native_calls++;
    span_sink_(s);
}

void Engine::on_symbol(uint32_t tgid, uint64_t lo, uint64_t hi, const char (&name)[kSymbolNameLen],
                       const char (&library)[kLibraryNameLen])
{
    std::string function = decode(name, sizeof(name), 0), lib = decode(library, sizeof(library), 0);
    uint32_t id = !function.empty() ? native_map_.function_id(function, lib)
                  : lib.empty()      ? anonymous_id_
                                     : native_map_.function_id("[unknown]", lib);
    if (hi <= lo)
        return;
    // What this range overlaps was written from older maps (lotus-bpf writes no overlapping ranges): it goes.
    auto& syms = symbols_[tgid];
    auto it = syms.upper_bound(lo);
    if (it != syms.begin() && std::prev(it)->second.hi > lo)
        --it;
    while (it != syms.end() && it->first < hi)
        it = syms.erase(it);
    syms.emplace(lo, Symbol{hi, id, !function.empty()});
}

void Engine::on_sample(const lotus_sample& smp)
{
    counters_.samples++;
    uint32_t n = std::min<uint32_t>(smp.nr_ips, LOTUS_STACK_DEPTH);
    auto syms = symbols_.find(smp.h.tgid);
    auto sym = [&](uint32_t i) -> const Symbol* {
        if (n <= i || syms == symbols_.end())
            return nullptr;
        auto it = syms->second.upper_bound(smp.ip[i]);
        if (it == syms->second.begin() || smp.ip[i] >= std::prev(it)->second.hi)
            return nullptr;
        return &std::prev(it)->second;
    };
    const Symbol* leaf = sym(0);
    const uint32_t* id = nullptr; // of the named function the sample goes to
    if (leaf && leaf->named) {
        id = &leaf->map_id;
    } else if (auto st = natives_.find(smp.h.tid); st != natives_.end() && !st->second.empty()) {
        // Code without a symbol (a hidden or static function) inside a probed call: that call's time.
        auto f = native_funcs_.find(st->second.back().func);
        if (f != native_funcs_.end() && !f->second.name.empty())
            id = &f->second.map_id;
    }
    for (uint32_t i = 1; !id && i < n; i++) // else the nearest caller with a name
        if (const Symbol* c = sym(i); c && c->named)
            id = &c->map_id;
    // Else "[unknown]" in the leaf's library, "[anonymous]" memory, or "[no user stack]".
    uint32_t fn = id ? *id : leaf ? leaf->map_id : n ? anonymous_id_ : no_stack_id_;
    native_map_.sample(smp.h.tid, smp.h.ts_ns, fn, id != nullptr, smp.in_kernel != 0);
}

void Engine::close_implicit(uint32_t tid)
{
    auto it = implicit_.find(tid);
    if (it == implicit_.end() || !it->second.open)
        return;
    Implicit imp = std::move(it->second);
    it->second = Implicit{};
    if (imp.ops.empty())
        return;
    batches_.sample_started(imp.pid, tid, imp.start_ns, imp.sample_id, imp.index);
    auto [owner, loader] = batches_.data_for(imp.pid, tid);
    Span s = Span::make(SpanKind::Sample, "sample", imp.pid, tid, imp.start_ns, imp.end_ns);
    s.sample = imp.index;
    s.sample_id = imp.sample_id;
    s.owner = owner;
    s.loader = loader;
    s.args.emplace_back("implicit", true);
    process(imp.pid).samples++;
    batches_.sample_finished(imp.pid, tid, imp.end_ns);
    emit_sample(imp.pid, tid, std::move(imp.ops), std::move(s));
}

void Engine::discard(std::vector<Open>& stack)
{
    counters_.incomplete += stack.back().ops.size();
    stack.pop_back();
}

void Engine::finish()
{
    // Returned and implicit samples are complete once their calls returned: the next item, a hand-over or the end
    // closes them; here in the order they ended.
    std::vector<std::pair<uint64_t, uint32_t>> open;
    for (auto& [tid, imp] : implicit_)
        if (imp.open)
            open.emplace_back(imp.end_ns, tid);
    for (const auto& [tid, ret] : returned_)
        if (ret.open)
            open.emplace_back(ret.end_ns, tid);
    std::sort(open.begin(), open.end());
    for (auto [end, tid] : open)
        close_samples(tid);
    std::vector<uint32_t> holding;
    for (const auto& [tid, held] : held_)
        holding.push_back(tid);
    for (auto tid : holding)
        release_held(tid, true);
    batches_.finish();
    for (auto& [tid, stack] : stacks_) {
        while (!stack.empty()) {
            counters_.incomplete++;
            discard(stack);
        }
    }
    stacks_.clear();
    native_map_.finish();
}

} // namespace lotus::model
