// The engine's Python call stacks: entries and returns per thread, spans opened and closed at their depth, an
// op's name.
#include "engine.h"
#include "engine_records.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace lotus::model {

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
            if (batches_.iter_begin(e.h.tgid, e.h.tid, e.self_obj) && reads_objects())
                requests_->describe_object(e.h.tgid, e.self_obj, kObjectLoader);
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
            if (batches_.next_started(e.h.tgid, e.h.tid, e.h.ts_ns, e.self_obj, td->role.single_process) &&
                reads_objects())
                requests_->describe_object(e.h.tgid, e.self_obj, kObjectIterator);
            stack.push_back(opened(OpenKind::Next, e));
            loader_iterated(e.h.tgid, e.h.ts_ns, td->role.single_process);
        }
        return;
    default:
        break;
    }
    // An object called by an op that is no level (a class no --pipeline names): its own frames again, or one of the
    // calls it runs, which the summary names (containers()).
    if (!pipeline_call && r->kind == CodeKind::ObjectCall && !stack.empty() && stack.back().kind == OpenKind::Op &&
        !stack.back().level) {
        Open& op = stack.back();
        if (e.depth == (op.own_depth ? op.own_depth : op.depth) + 1) {
            if (e.self_obj && e.self_obj == op.self_obj)
                op.own_depth = e.depth;
            else if (op.callees.size() < 64)
                op.callees.emplace_back(e.self_type, (e.own & LOTUS_OWN_SELF_TYPE) != 0);
        }
        return;
    }
    // A pipeline object called (outside any sample: a pipeline used inside an op is part of that op).
    if (pipeline_call && !in_sample)
        open_sample(stack, e);
}

void Engine::note_container(uint32_t tgid, const Open& o, const std::string& name, bool in_pipeline)
{
    auto it = std::find_if(containers_.begin(), containers_.end(), [&](const ContainerSeen& c) { return c.op == name; });
    if (it == containers_.end()) {
        ContainerSeen c{name, {}, 0, tgid, in_pipeline};
        for (const auto& [type, own] : o.callees) {
            std::string t = type_name(tgid, type, own);
            c.callees.push_back(t.empty() ? "?" : class_name(t));
        }
        containers_.push_back(std::move(c));
        it = containers_.end() - 1;
    }
    it->calls++;
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
        batches_.iter_end(r.h.tgid, r.h.tid, r.ret_null ? 0 : r.ret_obj, r.h.ts_ns);
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
        batches_.sample_finished(r.h.tgid, r.h.tid, r.h.ts_ns, &r.counters);
        returned_[r.h.tid] = Returned{true, r.h.tgid, std::move(o), r.h.ts_ns, r.counters, r.ret_null != 0};
        return;
    case OpenKind::Op:
        break;
    }
    if (o.callees.size() >= 2 && containers_.size() < 256)
        note_container(r.h.tgid, o, op_name(r.h.tgid, o),
                       std::any_of(stack.begin(), stack.end(), [](const Open& x) { return x.kind == OpenKind::Sample; }));
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
        batches_.sample_finished(r.h.tgid, r.h.tid, r.h.ts_ns, &r.counters);
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

} // namespace lotus::model
