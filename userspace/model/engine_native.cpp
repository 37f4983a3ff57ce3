// The engine's native attribution: native calls as spans, sampled addresses' names, samples given to the op
// open on their thread.
#include "engine.h"
#include "engine_records.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <tuple>

namespace lotus::model {

void Engine::drop_left_natives(std::vector<OpenNative>& stack, uint64_t sp, bool at)
{
    // The stack grows down: an open call's entry sp is above (greater than) any call it made. A frame below
    // (at) this sp belongs to a call that is over.
    while (!stack.empty() && stack.back().sp && (stack.back().sp < sp || (at && stack.back().sp == sp))) {
        stack.pop_back();
        counters_.native_unended++;
    }
}

void Engine::on_native(const lotus_native& n)
{
    auto& stack = natives_[n.h.tid];
    if (n.h.type == LOTUS_EV_NATIVE_ENTRY) {
        thread_owner_[n.h.tid] = n.h.tgid;
        // A new call's return address goes where the calls it finds at or below its own left theirs: those are
        // over (a call at the same sp is one that left by a tail call, or by an exception caught in the caller).
        if (n.sp)
            drop_left_natives(stack, n.sp, true);
        stack.push_back({n.func, n.h.ts_ns, n.sp});
        return;
    }
    OpenNative o{};
    if (n.sp) {
        // A return instruction reached with the sp a call had at its entry: that call returns now, whichever
        // function's code the instruction is in (one it tail-called, its cold part). The calls below it were left
        // by an exception (or a tail call). A return at another sp is some other call's: no span.
        drop_left_natives(stack, n.sp, false);
        if (stack.empty() || stack.back().sp != n.sp) {
            counters_.native_unmatched++;
            return;
        }
        o = stack.back();
        stack.pop_back();
    } else {
        // (Records before ABI 11, from return probes: the innermost open call of this function; calls above it
        // lost their returns.)
        auto it = std::find_if(stack.rbegin(), stack.rend(), [&](const OpenNative& x) { return x.func == n.func; });
        if (it == stack.rend()) {
            counters_.native_unmatched++;
            return;
        }
        o = *it;
        stack.erase(std::prev(it.base()), stack.end());
    }
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
    bool anchor = false;
    for (const auto& glob : rules_.framework().sample_anchors)
        anchor = anchor || (!function.empty() && fnmatch(glob.c_str(), function.c_str(), 0) == 0);
    syms.emplace(lo, Symbol{hi, id, !function.empty(), anchor});
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
    // Calls whose frames are above the sample's stack pointer are over (left by an exception, a tail call).
    auto st = natives_.find(smp.h.tid);
    if (st != natives_.end() && smp.sp)
        drop_left_natives(st->second, smp.sp, false);
    const Symbol* leaf = sym(0);
    const uint32_t* id = nullptr; // of the named function the sample goes to
    if (leaf && leaf->named) {
        id = &leaf->map_id;
    } else if (st != natives_.end() && !st->second.empty()) {
        // Code without a symbol (a hidden or static function) inside a probed call: that call's time.
        auto f = native_funcs_.find(st->second.back().func);
        if (f != native_funcs_.end() && !f->second.name.empty())
            id = &f->second.map_id;
    }
    for (uint32_t i = 1; !id && i < n; i++) // else the innermost anchor among the callers (an op's entry)
        if (const Symbol* c = sym(i); c && c->anchor)
            id = &c->map_id;
    for (uint32_t i = 1; !id && i < n; i++) // else the nearest caller with a name
        if (const Symbol* c = sym(i); c && c->named)
            id = &c->map_id;
    // Else "[unknown]" in the leaf's library, "[anonymous]" memory, or "[no user stack]".
    uint32_t fn = id ? *id : leaf ? leaf->map_id : n ? anonymous_id_ : no_stack_id_;
    native_map_.sample(smp.h.tid, smp.h.ts_ns, fn, id != nullptr, smp.in_kernel != 0);
}

} // namespace lotus::model
