#include "replay.h"

#include <algorithm>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/node_streams.h"
#include "model/record_dispatch.h"
#include "record/record_file.h"
#include "outputs.h"
#include "reconstruction.h"
#include "rules_file.h"
#include "self_usage.h"

namespace lotus::cli {

namespace {
struct Source;
}
static int replay_into(const Options& opts, std::vector<Source>& sources);

namespace {

// What a record file says of its own capture: the end record's counts (the session's, as tracing stopped), and
// the records user space added to the stream (processes alive at attach, capture slots), not events captured.
struct StreamCounts : model::RecordHandler {
    uint64_t added = 0, captured = 0, lost = 0;
    bool ended = false, ended_now = false;
    void end(const model::RecordEnd& e) override
    {
        captured = e.submitted;
        lost = e.lost;
        ended = ended_now = true;
    }
    void slots(const model::RecordSlots&) override { added++; }
    void known_process(const model::RecordProcess&) override { added++; }
};

// One record file of the replay: its reader, what its header says, and where its stream goes on the shared clock
// and in the shared id space.
struct Source {
    std::string path;
    std::unique_ptr<record::RecordReader> in;
    nlohmann::json meta;
    std::string node;
    int64_t realtime_minus_monotonic = 0;
    bool has_clock = false;
    model::StreamShift shift;
    StreamCounts counts;
    std::vector<uint8_t> next; // its next record (shifted), when have_next
    bool have_next = false;
    uint64_t records = 0, last_ns = 0;
};

std::vector<std::string> meta_strings(const nlohmann::json& meta, const char* key)
{
    std::vector<std::string> out;
    if (meta.contains(key) && meta[key].is_array())
        for (const auto& n : meta[key])
            if (n.is_string())
                out.push_back(n.get<std::string>());
    return out;
}

std::string meta_string(const nlohmann::json& meta, const char* key, const std::string& fallback)
{
    return meta.contains(key) && meta[key].is_string() ? meta[key].get<std::string>() : fallback;
}

Source open_source(const std::string& path)
{
    Source s;
    s.path = path;
    s.in = std::make_unique<record::RecordReader>(path);
    s.meta = nlohmann::json::parse(s.in->header().meta_json, nullptr, false);
    if (!s.meta.is_object()) // format 4's checksum catches damage; older files are checked here
        throw record::RecordError(path + ": the header's metadata is damaged (not a JSON object); not replayed");
    s.node = meta_string(s.meta, "node", "");
    if (s.meta.contains("clock") && s.meta["clock"].is_object()) {
        const auto& c = s.meta["clock"];
        if (c.contains("realtime_ns") && c["realtime_ns"].is_number_unsigned() && c.contains("monotonic_ns") &&
            c["monotonic_ns"].is_number_unsigned()) {
            s.realtime_minus_monotonic = static_cast<int64_t>(c["realtime_ns"].get<uint64_t>()) -
                                         static_cast<int64_t>(c["monotonic_ns"].get<uint64_t>());
            s.has_clock = true;
        }
    }
    return s;
}

// The process and thread ids a record file's stream uses (a first pass over it).
std::set<uint32_t> ids_of(const std::string& path)
{
    record::RecordReader in(path);
    std::set<uint32_t> ids;
    std::vector<uint8_t> r;
    while (in.next(r))
        if (r.size() >= sizeof(lotus_event_header)) {
            auto* h = reinterpret_cast<const lotus_event_header*>(r.data());
            if (h->tgid)
                ids.insert(h->tgid);
            if (h->tid)
                ids.insert(h->tid);
        }
    return ids;
}

// Several files: each on the first's clock (CLOCK_REALTIME at each capture's start), each named by its node, and
// ids moved where they collide with an earlier file's.
void place_sources(std::vector<Source>& sources)
{
    if (sources.size() > model::kMaxNodes + 1)
        throw std::runtime_error(fmt::format("{} record files: at most {} in one report", sources.size(),
                                             model::kMaxNodes + 1));
    std::set<std::string> names;
    std::set<uint32_t> taken;
    for (size_t i = 0; i < sources.size(); i++) {
        auto& s = sources[i];
        if (!s.has_clock)
            throw std::runtime_error(fmt::format("{} keeps no clock pair (it was recorded by an older lotus-bpf): it "
                                                 "cannot be placed on one clock with the other files", s.path));
        if (s.node.empty() || names.count(s.node)) // (an older file, or two of one machine: named apart)
            s.node = fmt::format("{}{}", s.node.empty() ? "node" : s.node + "#", i);
        names.insert(s.node);
        s.shift.clock_ns = s.realtime_minus_monotonic - sources[0].realtime_minus_monotonic;
        auto ids = ids_of(s.path);
        bool collides = std::any_of(ids.begin(), ids.end(), [&](uint32_t id) { return taken.count(id) > 0; });
        s.shift.node = collides ? static_cast<uint32_t>(i) : 0;
        for (uint32_t id : ids)
            taken.insert(s.shift.node ? id + s.shift.node * model::kNodeIdStride : id);
    }
}

} // namespace

// A corrupt record file throws before anything is committed: the outputs keep what they had.
int replay(const Options& opts)
{
    std::vector<Source> sources;
    sources.push_back(open_source(opts.replay));
    for (const auto& p : opts.replay_more)
        sources.push_back(open_source(p));
    return replay_into(opts, sources);
}

namespace {

// The rules the captures ran with (they decided what BPF emitted), plus any given now; one table of torch
// knowledge, the captures' (a --rules file's then), else the built-in one; never one given now.
RuleLists replay_rules(const Options& opts, const std::vector<Source>& sources)
{
    auto lists = rule_lists(opts);
    for (const auto& s : sources) {
        for (auto& p : meta_strings(s.meta, "pipelines"))
            if (std::find(lists.pipelines.begin(), lists.pipelines.end(), p) == lists.pipelines.end())
                lists.pipelines.push_back(p);
        for (auto& sp : meta_strings(s.meta, "spans"))
            if (std::find(lists.spans.begin(), lists.spans.end(), sp) == lists.spans.end())
                lists.spans.push_back(sp);
        if (s.meta.value("framework", nlohmann::json()) != sources[0].meta.value("framework", nlohmann::json()))
            throw std::runtime_error(fmt::format("{} and {} were recorded with different torch knowledge (a --rules "
                                                 "file's framework): report them apart", sources[0].path, s.path));
        if (s.meta.value("sample_anchors", nlohmann::json()) != sources[0].meta.value("sample_anchors", nlohmann::json()))
            throw std::runtime_error(fmt::format("{} and {} were recorded with different sample anchors (the torch "
                                                 "knowledge that names a hidden kernel): report them apart",
                                                 sources[0].path, s.path));
        if (meta_strings(s.meta, "counters") != meta_strings(sources[0].meta, "counters"))
            throw std::runtime_error(fmt::format("{} and {} were recorded with different --counters: report them "
                                                 "apart", sources[0].path, s.path));
    }
    if (lists.framework)
        fmt::print(stderr, "lotus-bpf: {}'s \"framework\" is not used: a replay reconstructs with the knowledge the "
                           "capture ran with\n", opts.rules_file);
    const auto& meta = sources[0].meta;
    lists.framework = meta.contains("framework") ? std::make_shared<const model::framework::Framework>(
                                                       parse_framework(meta["framework"], sources[0].path))
                                                 : nullptr;
    if (!lists.framework && !meta.contains("sample_anchors")) { // recorded before sample anchors: named without them
        auto older = std::make_shared<model::framework::Framework>(model::framework::builtin());
        older->sample_anchors.clear();
        lists.framework = older;
    }
    return lists;
}

// The next record of s (shifted onto the shared clock and ids), skipping its end record (the session's counts).
void advance(Source& s)
{
    s.have_next = false;
    while (s.in->next(s.next)) {
        s.counts.ended_now = false;
        model::dispatch(s.next.data(), s.next.size(), s.counts);
        if (s.counts.ended_now)
            continue;
        model::shift_record(s.next.data(), s.next.size(), s.shift);
        s.have_next = true;
        return;
    }
}

uint64_t ts_of(const std::vector<uint8_t>& r)
{
    return r.size() >= sizeof(lotus_event_header) ? reinterpret_cast<const lotus_event_header*>(r.data())->ts_ns : 0;
}

} // namespace

static int replay_into(const Options& opts, std::vector<Source>& sources)
{
    const bool several = sources.size() > 1;
    if (several)
        place_sources(sources);
    auto lists = replay_rules(opts, sources);
    uint64_t t0 = UINT64_MAX;
    for (const auto& s : sources)
        t0 = std::min<uint64_t>(t0, static_cast<uint64_t>(static_cast<int64_t>(s.in->header().t0_ns) + s.shift.clock_ns));
    Outputs outputs(opts);
    Reconstruction rec(opts, outputs, std::move(lists), t0, meta_strings(sources[0].meta, "counters"));
    // Which node each process is on: its labels say so where there are several.
    std::map<uint32_t, std::string> node_of;
    rec.set_node_of([&node_of, &sources](uint32_t pid) {
        auto it = node_of.find(pid);
        return it != node_of.end() ? it->second : sources[0].node;
    }, several);
    // The streams as they were captured, into the engine, merged by time: each file's own order is kept, the file
    // whose next record is earliest goes first.
    for (auto& s : sources) {
        s.last_ns = t0;
        advance(s);
    }
    while (true) {
        Source* first = nullptr;
        for (auto& s : sources)
            if (s.have_next && (!first || ts_of(s.next) < ts_of(first->next)))
                first = &s;
        if (!first)
            break;
        auto* h = reinterpret_cast<const lotus_event_header*>(first->next.data());
        if (several && h->tgid)
            node_of.try_emplace(h->tgid, first->node);
        first->records++;
        first->last_ns = std::max<uint64_t>(first->last_ns, h->ts_ns);
        rec.consume(first->next.data(), first->next.size());
        advance(*first);
    }
    exporter::RunInfo run;
    const auto& meta = sources[0].meta;
    run.tool = "lotus-bpf " LOTUS_VERSION;
    run.target_pid = sources[0].in->header().root_pid;
    run.t0_monotonic_ns = t0;
    run.python = meta_string(meta, "python", "?");
    run.interpreter = meta_string(meta, "interpreter", "?");
    run.layout = meta_string(meta, "layout", "?");
    if (meta.contains("cpus") && meta["cpus"].is_number_unsigned())
        run.cpus = meta["cpus"].get<unsigned>();
    if (meta.contains("resources_interval_ms") && meta["resources_interval_ms"].is_number_unsigned())
        run.resources_interval_ms = meta["resources_interval_ms"].get<unsigned>();
    std::vector<std::string> unended;
    for (auto& s : sources) {
        uint64_t events = s.records - s.counts.added;
        run.events += s.counts.captured ? s.counts.captured : events;
        run.lost_events += s.counts.lost;
        if (!s.counts.ended) // the session writes its end record as tracing stops: the file ends before the run did
            unended.push_back(fmt::format("{}, which has no end record: its writing stopped before the run ended (as "
                                          "a cut at --disk-reserve does), so these figures cover its first {:.2f} s "
                                          "only", s.path,
                                          static_cast<double>(s.last_ns - std::min(s.last_ns, t0)) / 1e9));
        if (several)
            run.nodes.push_back({s.node, s.path, static_cast<double>(s.shift.clock_ns) / 1e6, s.shift.node});
        if (meta_string(s.meta, "python", "?") != run.python)
            run.python += ", " + meta_string(s.meta, "python", "?");
    }
    run.stop_reason = "replayed " + opts.replay;
    for (const auto& p : opts.replay_more)
        run.stop_reason += ", " + p;
    for (const auto& u : unended)
        run.stop_reason += "; " + u;
    run.tracer_peak_rss_kb = peak_rss_kb();
    run.tracer_cpu_ms = cpu_ms();
    bool all_calls = meta.contains("all_calls") && meta["all_calls"].is_boolean() && meta["all_calls"].get<bool>();
    // A version the table does not know is taken as inlining, as every version since 3.11 does.
    auto version = cpython::parse_version(meta_string(meta, "python", "?"));
    auto caps = version ? cpython::caps_for(*version) : std::nullopt;
    bool inlined = calls_inlined(caps.value_or(cpython::VersionCaps{}), all_calls);
    return rec.finish(std::move(run), inlined) ? 0 : kExitOutputFailed;
}

} // namespace lotus::cli
