#include "engine.h"

#include "common/json.h"

#include <algorithm>
#include <cstring>

namespace lotus::model {

namespace {

bool ends_with(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Bytes that claim to be UTF-8 (names read from the target, or from a damaged record file), with every byte
// that does not start or continue a valid sequence replaced by '?': output files stay valid UTF-8 JSON.
std::string valid_utf8(const char* p, size_t n)
{
    std::string out;
    out.reserve(n);
    for (size_t i = 0; i < n;) {
        auto c = static_cast<unsigned char>(p[i]);
        size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
        bool ok = len > 0 && i + len <= n && !(len == 2 && c < 0xc2) && c <= 0xf4;
        if (ok && len > 2) { // no overlong forms, surrogates or code points past U+10FFFF
            auto c1 = static_cast<unsigned char>(p[i + 1]);
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) && !(c == 0xf0 && c1 < 0x90) &&
                 !(c == 0xf4 && c1 >= 0x90);
        }
        for (size_t k = 1; ok && k < len; k++)
            ok = (static_cast<unsigned char>(p[i + k]) & 0xc0) == 0x80;
        if (ok) {
            out.append(p + i, len);
            i += len;
        } else {
            out += '?';
            i++;
        }
    }
    return out;
}

std::string decode(const char* buf, size_t cap, uint8_t kind)
{
    if (kind != 0 && kind != 1 && kind != 2 && kind != 4)
        return "?"; // unreadable (0xff), or a corrupt record
    if (kind == 0)
        return valid_utf8(buf, strnlen(buf, cap));
    // Non-ASCII compact str: keep the code points below 256, mark the others.
    std::string out;
    for (size_t i = 0; i + kind <= cap; i += kind) {
        uint32_t cp = 0;
        memcpy(&cp, buf + i, kind);
        if (cp == 0)
            break;
        out += cp < 128 ? static_cast<char>(cp) : '?';
    }
    return out;
}

template <typename T>
const T* as(const void* data, size_t len)
{
    return len >= sizeof(T) ? static_cast<const T*>(data) : nullptr;
}

} // namespace

Engine::Engine(const Rules& rules, SpanSink spans, RoleSink roles)
    : rules_(rules),
      span_sink_([this, sink = std::move(spans)](const Span& s) {
          native_map_.span(s);
          if (sink)
              sink(s);
      }),
      role_sink_(std::move(roles))
{
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
}

void Engine::consume(const void* data, size_t len)
{
    counters_.events++;
    auto* h = as<lotus_event_header>(data, len);
    if (!h) {
        counters_.malformed++;
        return;
    }
    if (h->type == LOTUS_EV_PY_ENTRY || h->type == LOTUS_EV_PY_RETURN || h->type == LOTUS_EV_WAIT_DONE) {
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
        if (auto* t = as<lotus_type_info>(data, len)) {
            spaces_.add_type(t->h.tgid, t->type, decode(t->name, sizeof(t->name), 0));
            return;
        }
        break;
    case LOTUS_EV_WAIT_DONE:
        if (auto* w = as<lotus_wait_done>(data, len)) {
            if (w->ret > 0) // data arrived (0: timed out)
                batches_.wait_done(w->h.tgid, w->h.tid, w->h.ts_ns);
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
            native_funcs_[f->func] = {decode(f->name, sizeof(f->name), 0), decode(f->library, sizeof(f->library), 0)};
            return;
        }
        break;
    case kRecordSymbol:
        if (auto* r = as<RecordSymbol>(data, len))
            return on_symbol(*r);
        break;
    case kRecordSlots:
    case kRecordProcess:
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
}

const CodeInfo* Engine::code_info(uint32_t tgid, uint64_t code)
{
    auto* d = spaces_.code(tgid, code);
    return d ? &d->info : nullptr;
}

const CodeRole* Engine::role(uint32_t tgid, uint64_t code)
{
    auto* d = spaces_.code(tgid, code);
    return d ? &d->role : nullptr;
}

std::string Engine::type_name(uint32_t tgid, uint64_t type)
{
    auto* t = spaces_.type(tgid, type);
    return t ? *t : std::string();
}

void Engine::on_process(const lotus_proc_event& p)
{
    uint32_t pid = p.h.tgid;
    switch (p.h.type) {
    case LOTUS_EV_FORK: {
        auto& info = process(pid);
        info.parent = p.parent_tgid;
        spaces_.forked(pid, p.parent_tgid, p.space); // same memory image: same objects at the same addresses

        batches_.forked(pid);
        break;
    }
    case LOTUS_EV_EXEC:
        // A new program image: nothing known about the old one's objects holds for it.
        spaces_.execed(pid, p.space);
        symbols_.erase(pid);
        break;
    case LOTUS_EV_EXIT:
        process(pid).exited = true;
        for (auto it = thread_owner_.begin(); it != thread_owner_.end();) {
            if (it->second == pid) {
                close_implicit(it->first);
                close_thread(it->first);
                it = thread_owner_.erase(it);
            } else {
                ++it;
            }
        }
        spaces_.exited(pid);
        symbols_.erase(pid);
        break;
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
    const CodeRole* r = role(e.h.tgid, e.code);
    if (!r) {
        counters_.unknown_code++;
        return;
    }
    if (r->span) {
        stack.push_back(Open{OpenKind::Py, e.depth, e.h.ts_ns, e.code, 0, 0, -1, 0, {}});
        return;
    }
    bool in_sample = !stack.empty() && stack.back().kind == OpenKind::Sample && stack.back().depth + 1 == e.depth;
    if (in_sample) {
        const Open& sample = stack.back();
        stack.push_back(Open{OpenKind::Op, e.depth, e.h.ts_ns, e.code, e.self_type, 0, sample.sample, sample.sample_id, {}});
        stack.back().counters = e.counters;
        return;
    }
    // Locals captured from the frames above: DataLoader worker id and batch index.
    int64_t batch_idx = -1;
    for (uint32_t i = 0; i < e.capture_count && i < LOTUS_MAX_CAPTURES; i++) {
        const CodeRole* cr = role(e.h.tgid, e.capture_code[i]);
        if (!cr || !cr->worker_loop || e.capture_value[i] == LOTUS_NO_VALUE)
            continue;
        for (size_t k = 0; k < cr->capture_slots.size() && k < cr->capture_locals.size(); k++) {
            if (cr->capture_slots[k] != e.capture_slot[i])
                continue;
            if (cr->capture_locals[k] == "worker_id")
                process(e.h.tgid).worker_id = static_cast<int>(e.capture_value[i]);
            else if (cr->capture_locals[k] == "idx")
                batch_idx = e.capture_value[i];
        }
    }
    auto chain_role = [&](uint32_t i) -> const CodeRole* {
        return i < e.chain_len && i < LOTUS_CHAIN_LEN ? role(e.h.tgid, e.chain_code[i]) : nullptr;
    };
    if (const CodeRole* c0 = chain_role(0); c0 && c0->queue_put) {
        // data_queue.put((idx, data)) called by _worker_loop: the worker hands the batch over.
        if (const CodeRole* c1 = chain_role(1); c1 && c1->worker_loop) {
            close_implicit(e.h.tid);
            batches_.batch_put(e.h.tgid, e.h.tid, e.h.ts_ns, batch_idx);
        }
        return;
    }
    if (const CodeRole* c0 = chain_role(0); c0 && c0->worker_loop) {
        // _worker_loop making _IterableDatasetStopIteration(worker_id) (a dataclass: its __init__ is
        // generated code, recognised by the class of self): the worker's data ran out.
        if (type_name(e.h.tgid, e.self_type).find("_IterableDatasetStopIteration") != std::string::npos)
            batches_.stop_marker(e.h.tgid, e.h.tid);
        return;
    }
    auto from_fetcher = [&] { // a dataset's __getitem__ called by a DataLoader fetcher, not any __getitem__
        for (uint32_t i = 1; i < LOTUS_CHAIN_LEN; i++)
            if (const CodeRole* ci = chain_role(i); ci && ci->fetcher)
                return true;
        return false;
    };
    if (const CodeRole* c0 = chain_role(0); c0 && c0->getitem && !r->pipeline && !r->internal && from_fetcher()) {
        auto& imp = implicit_[e.h.tid];
        int64_t index = e.chain_arg1[0] == LOTUS_NO_VALUE ? -1 : e.chain_arg1[0];
        if (!imp.open || imp.index != index) {
            close_implicit(e.h.tid);
            imp = Implicit{true, e.h.tgid, index, batch_idx, ++sample_seq_, e.h.ts_ns, e.h.ts_ns, {}};
        }
        stack.push_back(Open{OpenKind::Op, e.depth, e.h.ts_ns, e.code, e.self_type, 0, index, imp.sample_id, {}});
        stack.back().counters = e.counters;
        return;
    }
    auto self_type = [&] { return type_name(e.h.tgid, e.self_type); };
    if ((r->iter_init || r->loader_next) && !ends_with(self_type(), "DataLoaderIter"))
        return; // e.g. DataLoader.__init__ where names carry no class (3.10)
    if (r->iter_init) {
        batches_.iterator_created(e.h.tgid, e.self_obj, e.arg1_obj);
        stack.push_back(Open{OpenKind::IterInit, e.depth, e.h.ts_ns, e.code, 0, e.self_obj, -1, 0, {}});
        return;
    }
    if (r->loader_next) {
        bool single = self_type().find("SingleProcess") != std::string::npos;
        batches_.next_started(e.h.tgid, e.h.tid, e.h.ts_ns, e.self_obj, single);
        stack.push_back(Open{OpenKind::Next, e.depth, e.h.ts_ns, e.code, e.self_type, e.self_obj, -1, 0, {}, single});
        return;
    }
    if (!r->pipeline || (r->pipeline_if_self && !rules_.pipeline_class(self_type())))
        return;
    pipeline_seen_ = true;
    int64_t index = -1;
    for (uint32_t i = 0; i < e.chain_len && i < LOTUS_CHAIN_LEN; i++) {
        const CodeRole* cr = role(e.h.tgid, e.chain_code[i]);
        if (cr && cr->getitem) {
            if (e.chain_arg1[i] != LOTUS_NO_VALUE)
                index = e.chain_arg1[i];
            break;
        }
    }
    // Calls __getitem__ made before its pipeline call (the loader's, while the interpreter had not specialised
    // them yet) are not an implicit sample: this is the sample.
    if (auto imp = implicit_.find(e.h.tid); imp != implicit_.end())
        imp->second = Implicit{};
    stack.push_back(Open{OpenKind::Sample, e.depth, e.h.ts_ns, e.code, 0, 0, index, ++sample_seq_, {}});
    stack.back().counters = e.counters;
    batches_.sample_started(e.h.tgid, e.h.tid, e.h.ts_ns, batch_idx, sample_seq_, index);
}

std::string Engine::op_name(uint32_t tgid, uint64_t code, uint64_t self_type)
{
    auto* c = code_info(tgid, code);
    std::string type = type_name(tgid, self_type);
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
    if (o.kind == OpenKind::Next) {
        close_implicit(r.h.tid);
        batches_.next_finished(r.h.tgid, r.h.tid, o.start_ns, r.h.ts_ns, o.self_obj, o.single_process, r.ret_null);
        return;
    }
    if (o.kind == OpenKind::IterInit) {
        batches_.iterator_constructed(r.h.tgid, o.self_obj);
        return;
    }
    if (o.kind == OpenKind::Py) {
        auto* c = code_info(r.h.tgid, o.code);
        Span py = Span::make(SpanKind::Py, c ? c->name : "?", r.h.tgid, r.h.tid, o.start_ns, r.h.ts_ns);
        py.depth = o.depth;
        if (c)
            py.args.emplace_back("file", exporter::json_string(c->file + ":" + std::to_string(c->firstlineno)));
        if (span_sink_)
            span_sink_(py);
        return;
    }
    Span s = o.kind == OpenKind::Sample
                 ? Span::make(SpanKind::Sample, "sample", r.h.tgid, r.h.tid, o.start_ns, r.h.ts_ns)
                 : Span::make(SpanKind::Op, op_name(r.h.tgid, o.code, o.self_type), r.h.tgid, r.h.tid, o.start_ns,
                              r.h.ts_ns);
    s.sample = o.sample;
    s.sample_id = o.sample_id;
    s.depth = o.depth;
    auto delta = [](uint64_t a, uint64_t b) { return b > a ? b - a : 0; };
    s.has_counters = true;
    s.counters = Counters{delta(o.counters.cpu_ns, r.counters.cpu_ns), delta(o.counters.min_flt, r.counters.min_flt),
                          delta(o.counters.maj_flt, r.counters.maj_flt), delta(o.counters.nvcsw, r.counters.nvcsw),
                          delta(o.counters.nivcsw, r.counters.nivcsw), {}};
    static_assert(kMaxPerfCounters == LOTUS_MAX_PERF);
    for (unsigned k = 0; k < kMaxPerfCounters; k++)
        s.counters.perf[k] = delta(o.counters.perf[k], r.counters.perf[k]);
    if (s.kind == SpanKind::Op) {
        // Its sample is now on top (an op is opened only directly inside one), or it is implicit.
        if (!stack.empty() && stack.back().kind == OpenKind::Sample && stack.back().sample_id == s.sample_id) {
            stack.back().ops.push_back(std::move(s));
        } else if (auto imp = implicit_.find(r.h.tid); imp != implicit_.end() && imp->second.open &&
                   imp->second.sample_id == s.sample_id) {
            imp->second.end_ns = s.end_ns;
            imp->second.ops.push_back(std::move(s));
        }
        return;
    }
    process(r.h.tgid).samples++;
    batches_.sample_finished(r.h.tgid, r.h.tid, r.h.ts_ns);
    if (span_sink_) {
        for (const auto& op : o.ops)
            span_sink_(op);
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
        s.args.emplace_back("library", exporter::json_string(f->second.library));
    counters_.native_calls++;
    span_sink_(s);
}

void Engine::on_symbol(const RecordSymbol& r)
{
    symbols_[r.tgid][r.ip] = {decode(r.name, sizeof(r.name), 0), decode(r.library, sizeof(r.library), 0)};
}

void Engine::on_sample(const lotus_sample& smp)
{
    counters_.samples++;
    uint32_t n = std::min<uint32_t>(smp.nr_ips, LOTUS_STACK_DEPTH);
    auto syms = symbols_.find(smp.h.tgid);
    auto sym = [&](uint32_t i) -> const std::pair<std::string, std::string>* {
        if (n <= i || syms == symbols_.end())
            return nullptr;
        auto it = syms->second.find(smp.ip[i]);
        return it == syms->second.end() ? nullptr : &it->second;
    };
    std::string function, library;
    const auto* leaf = sym(0);
    if (leaf && !leaf->first.empty()) {
        function = leaf->first, library = leaf->second;
    } else if (auto st = natives_.find(smp.h.tid); st != natives_.end() && !st->second.empty()) {
        // Code without a symbol (a hidden or static function) inside a probed call: that call's time.
        auto f = native_funcs_.find(st->second.back().func);
        if (f != native_funcs_.end())
            function = f->second.name, library = f->second.library;
    }
    for (uint32_t i = 1; function.empty() && i < n; i++) // else the nearest caller with a name
        if (const auto* c = sym(i); c && !c->first.empty())
            function = c->first, library = c->second;
    bool named = !function.empty();
    if (!named) {
        function = "[unknown]";
        library = leaf && !leaf->second.empty() ? leaf->second : (n ? "[anonymous]" : "[no user stack]");
    }
    native_map_.sample(smp.h.tid, smp.h.ts_ns, function, library, named, smp.in_kernel != 0);
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
    batches_.sample_started(imp.pid, tid, imp.start_ns, imp.batch_idx, imp.sample_id, imp.index);
    Span s = Span::make(SpanKind::Sample, "sample", imp.pid, tid, imp.start_ns, imp.end_ns);
    s.sample = imp.index;
    s.sample_id = imp.sample_id;
    s.args.emplace_back("implicit", "true");
    process(imp.pid).samples++;
    batches_.sample_finished(imp.pid, tid, imp.end_ns);
    if (span_sink_) {
        for (const auto& op : imp.ops)
            span_sink_(op);
        span_sink_(s);
    }
}

void Engine::discard(std::vector<Open>& stack)
{
    counters_.incomplete += stack.back().ops.size();
    stack.pop_back();
}

void Engine::finish()
{
    // Implicit samples are complete once their calls returned: the next sample, a hand-over or the end closes them.
    std::vector<uint32_t> open;
    for (auto& [tid, imp] : implicit_)
        if (imp.open)
            open.push_back(tid);
    for (auto tid : open)
        close_implicit(tid);
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
