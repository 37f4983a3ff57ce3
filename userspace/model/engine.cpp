#include "engine.h"
#include "engine_records.h"

#include "common/utf8.h"
#include "process_fold.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace lotus::model {

Engine::Engine(const Rules& rules, SpanSink spans, CaptureRequests* requests)
    : rules_(rules),
      span_sink_([this, sink = std::move(spans)](const Span& s) {
          native_map_.span(s);
          if (s.kind != SpanKind::Native) {
              auto& first = process(s.pid).first_span_ns;
              first = first ? std::min(first, s.start_ns) : s.start_ns;
          }
          if (s.kind == SpanKind::Wait) { // it goes out with its causes
              Span w = s;
              wait_causes_.attribute(w);
              if (sink)
                  sink(w);
              return;
          }
          wait_causes_.see(s);
          if (sink)
              sink(s);
      }),
      requests_(requests)
{
    span_calls_.resize(rules.spans().size());
    anonymous_id_ = native_map_.function_id("[unknown]", "[anonymous]");
    no_stack_id_ = native_map_.function_id("[unknown]", "[no user stack]");
}

ProcessInfo& Engine::process(uint32_t pid)
{
    auto& p = processes_[pid];
    p.pid = pid;
    if (node_of_ && p.node.empty())
        p.node = node_of_(pid);
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
    if (!dispatch(data, len, *this))
        counters_.malformed++; // too short for its type, or of no known type
}

// A batch's last sample (a returned or implicit one) is complete once the batch ends: it belongs to that batch,
// so the thread's samples are closed before the tracker ends it.
void Engine::msg(const lotus_msg& m)
{
    if (uint32_t tid = batches_.message_begin(m))
        close_samples(tid);
    batches_.message_end();
}

void Engine::getppid(const lotus_event_header& h)
{
    if (batches_.getppid_ends_batch(h.tgid, h.tid))
        close_samples(h.tid);
    batches_.getppid(h.tgid, h.tid, h.ts_ns);
}

void Engine::open(const lotus_open& o)
{
    batches_.opened(o.h.tgid, o.h.tid, o.h.ts_ns, decode(o.path, sizeof(o.path), 0));
}

void Engine::open_done(const lotus_open_done& o)
{
    constexpr uint32_t kTypeBits = 0170000, kRegular = 0100000; // S_IFMT, S_IFREG
    // Only a regular file's size is its bytes (a pipe's or a device's i_size is not what was read).
    if (o.ret >= 0 && (o.mode & kTypeBits) == kRegular)
        batches_.open_size(o.h.tgid, o.h.tid, static_cast<int64_t>(o.size));
}

void Engine::rank(const RecordRank& r)
{
    auto& p = process(r.tgid);
    p.env_rank = r.rank;
    p.local_rank = r.local_rank;
    p.world_size = r.world_size;
}

void Engine::command(const RecordCommand& r)
{
    std::string line = decode(r.command, sizeof(r.command), 0);
    auto& p = process(r.tgid);
    p.helper.clear(); // (an exec: what it runs now)
    for (const auto& h : rules_.framework().helpers)
        if (line.find(h.command) != std::string::npos) {
            p.helper = h.role;
            break;
        }
}

void Engine::thread_name(const lotus_thread_name& t)
{
    process(t.h.tgid).thread_names[t.h.tid] = decode(t.comm, sizeof(t.comm), 0);
}

void Engine::native_func(const RecordNativeFunc& f)
{
    std::string name = decode(f.name, sizeof(f.name), 0), library = decode(f.library, sizeof(f.library), 0);
    uint32_t id = native_map_.function_id(name, library);
    native_funcs_[f.func] = {std::move(name), std::move(library), id};
}

void Engine::native_late(const RecordNativeLate& r)
{
    native_late_.push_back({r.tgid, decode(r.library, sizeof(r.library), 0), r.loaded_ns, r.ts_ns});
}

void Engine::other_interpreter(const RecordOtherInterpreter& r)
{
    other_interpreters_.push_back({r.tgid, decode(r.path, sizeof(r.path), 0)});
}

void Engine::untraced_python(const RecordUntracedPython& r)
{
    untraced_pythons_.push_back({r.tgid, decode(r.comm, sizeof(r.comm), 0), decode(r.path, sizeof(r.path), 0)});
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
        info.calls_off_ns = info.calls_on_ns = info.batches_unprobed = info.calls_cut = info.calls_kept_ns = 0;
        calls_asked_.erase(pid); // (a new process has every probe)
        unprobed_nexts_.erase(pid);
        nexts_before_off_.erase(pid);
        spaces_.forked(pid, p.parent_tgid, p.space); // same memory image: same objects at the same addresses
        batches_.forked(pid, p.parent_tgid);
        break;
    }
    case LOTUS_EV_EXEC:
        // A new program image: nothing known about the old one's objects holds for it.
        spaces_.execed(pid, p.space);
        symbols_.erase(pid);
        execed_calls(pid);
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
    for (const auto& [owner, j] : batches_.joins())
        if (j.loader >= 0)
            wait_causes_.merge({owner, -1}, {owner, j.loader});
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
