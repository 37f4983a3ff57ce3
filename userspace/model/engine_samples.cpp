// The engine's sample assembly: which calls are one item (a retry, a second view), samples opened, held until
// their batch is known, and implicit samples closed.
#include "engine.h"
#include "engine_records.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace lotus::model {

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
    batches_.sample_started(e.h.tgid, e.h.tid, e.h.ts_ns, sample_seq_, index, &e.counters);
    std::tie(s.owner, s.loader) = batches_.data_for(e.h.tgid, e.h.tid);
    stack.push_back(std::move(s));
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

} // namespace lotus::model
