#include "speedscope.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "export/json.h"
#include "export/summary.h"

namespace lotus::exporter {

namespace {

// The frame a span is, or "" for the spans that are not frames (samples, batches, instants).
std::string frame_name(const model::Span& s)
{
    switch (s.kind) {
    case model::SpanKind::Op:
    case model::SpanKind::Py: return row_name(s);
    case model::SpanKind::Loader: return "loader";
    case model::SpanKind::Collate: return "collate";
    case model::SpanKind::Wait: return "wait";
    case model::SpanKind::Native: return s.name;
    default: return {};
    }
}

// A role: a DataLoader worker id of one DataLoader of one training process (every process that played it), else
// the process itself.
using RoleKey = std::tuple<uint32_t, int, int, uint32_t>; // owner, loader, worker id, pid (0 for a worker id)

RoleKey role_of(uint32_t pid, const std::map<uint32_t, model::ProcessInfo>& processes)
{
    auto it = processes.find(pid);
    if (it == processes.end() || it->second.worker_id < 0 || !(it->second.worker || it->second.owner))
        return {0, -1, -1, pid};
    const auto& p = it->second;
    return {p.owner, p.loader, p.worker_id, 0};
}

} // namespace

uint32_t SpeedscopeWriter::frame_id(const std::string& name)
{
    auto [it, fresh] = frame_ids_.try_emplace(name, static_cast<uint32_t>(frames_.size()));
    if (fresh)
        frames_.push_back(name);
    return it->second;
}

void SpeedscopeWriter::add(const model::Span& s)
{
    std::string name = frame_name(s);
    if (name.empty())
        return;
    if (items_.size() >= kMaxSpans) {
        past_cap_++;
        return;
    }
    items_.push_back({s.start_ns, std::max(s.end_ns, s.start_ns), frame_id(name), s.pid, s.tid == s.pid});
}

uint64_t SpeedscopeWriter::write(common::OutputFile& out, const std::map<uint32_t, model::ProcessInfo>& processes,
                                 const std::string& tool, uint64_t t0_ns) const
{
    // A role's main threads in one profile; its other threads (a queue's feeder thread, a pin-memory thread) in
    // another, since their spans overlap the main thread's without nesting.
    std::map<std::pair<RoleKey, bool>, std::vector<const Item*>> roles;
    for (const auto& it : items_) {
        uint32_t pid = it.pid;
        for (int hops = 0; hops < 8; hops++) { // (a row folded into one folded later)
            auto a = alias_.find(pid);
            if (a == alias_.end())
                break;
            pid = a->second;
        }
        roles[{role_of(pid, processes), !it.main_thread}].push_back(&it);
    }
    std::set<int> loaders;
    for (const auto& [k, items] : roles)
        if (!std::get<3>(k.first))
            loaders.insert(std::get<1>(k.first));
    std::string text = fmt::format("{{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"exporter\":{},"
                                   "\"activeProfileIndex\":0,\"shared\":{{\"frames\":[",
                                   json_string(tool));
    for (size_t i = 0; i < frames_.size(); i++)
        text += fmt::format("{}{{\"name\":{}}}", i ? "," : "", json_string(frames_[i]));
    text += "]},\"profiles\":[";
    uint64_t overlapping = 0;
    bool first_profile = true;
    auto rel = [&](uint64_t ns) { return ns > t0_ns ? ns - t0_ns : 0; };
    for (auto& [k, items] : roles) {
        const RoleKey& key = k.first;
        // Outer spans first where two start together; then one stack per role, each span closed before the next
        // one that starts at or after its end opens.
        std::stable_sort(items.begin(), items.end(), [](const Item* a, const Item* b) {
            return a->start != b->start ? a->start < b->start : a->end > b->end;
        });
        uint32_t pid = std::get<3>(key);
        if (!pid) // a worker id: named after any process that played it
            for (const auto& [p, info] : processes)
                if (role_of(p, processes) == key) {
                    pid = p;
                    break;
                }
        std::string name = model::process_label(processes, pid);
        auto self = processes.find(pid);
        if (!std::get<3>(key) && loaders.size() > 1 && std::get<1>(key) >= 0)
            name += fmt::format(" (DataLoader {})", std::get<1>(key));
        else if (std::get<3>(key) && (self == processes.end() || (!self->second.root && !self->second.consumer)))
            name += fmt::format(" (PID {})", pid);
        if (k.second)
            name += ", other threads";
        text += fmt::format("{}{{\"type\":\"evented\",\"name\":{},\"unit\":\"nanoseconds\",\"events\":[",
                            first_profile ? "" : ",", json_string(name));
        first_profile = false;
        uint64_t last = rel(items.front()->start);
        bool first_event = true;
        auto event = [&](char type, uint64_t at, uint32_t frame) {
            last = std::max(last, rel(at));
            text += fmt::format("{}{{\"type\":\"{}\",\"at\":{},\"frame\":{}}}", first_event ? "" : ",", type, rel(at),
                                frame);
            first_event = false;
            if (text.size() > (1u << 20)) { // (a long run's events go out as they are made)
                out.write(text);
                text.clear();
            }
        };
        std::vector<const Item*> stack;
        for (const Item* it : items) {
            while (!stack.empty() && stack.back()->end <= it->start) {
                event('C', stack.back()->end, stack.back()->frame);
                stack.pop_back();
            }
            if (!stack.empty() && it->end > stack.back()->end) {
                overlapping++; // not inside the span open: another process's or thread's
                continue;
            }
            event('O', it->start, it->frame);
            stack.push_back(it);
        }
        while (!stack.empty()) {
            event('C', stack.back()->end, stack.back()->frame);
            stack.pop_back();
        }
        text += fmt::format("],\"startValue\":{},\"endValue\":{}}}", rel(items.front()->start), last);
    }
    uint64_t left_out = overlapping + past_cap_;
    std::string title = "lotus-bpf: the pipeline's spans per role";
    if (left_out)
        title += fmt::format(" ({} left out: {} overlapping without nesting, {} past {} spans)", left_out,
                             overlapping, past_cap_, kMaxSpans);
    text += fmt::format("],\"name\":{}}}\n", json_string(title));
    out.write(text);
    return left_out;
}

} // namespace lotus::exporter
