#include "replay.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/record_dispatch.h"
#include "record/record_file.h"
#include "outputs.h"
#include "reconstruction.h"
#include "rules_file.h"
#include "self_usage.h"

namespace lotus::cli {

static int replay_into(const Options& opts, record::RecordReader& in);

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

} // namespace

// A corrupt record file throws before anything is committed: the outputs keep what they had.
int replay(const Options& opts)
{
    record::RecordReader in(opts.replay);
    return replay_into(opts, in);
}

static int replay_into(const Options& opts, record::RecordReader& in)
{
    auto lists = rule_lists(opts);
    auto meta = nlohmann::json::parse(in.header().meta_json, nullptr, false);
    if (!meta.is_object()) // format 4's checksum catches damage; older files are checked here
        throw record::RecordError(opts.replay + ": the header's metadata is damaged (not a JSON object); not replayed");
    auto strings = [&](const char* key) {
        std::vector<std::string> out;
        if (meta.is_object() && meta.contains(key) && meta[key].is_array())
            for (const auto& n : meta[key])
                if (n.is_string())
                    out.push_back(n.get<std::string>());
        return out;
    };
    // The rules the capture ran with (they decided what BPF emitted), plus any given now.
    for (auto& p : strings("pipelines"))
        lists.pipelines.push_back(p);
    for (auto& sp : strings("spans"))
        lists.spans.push_back(sp);
    // The knowledge of torch the capture ran with (it decided what BPF emitted): the record's (a --rules file's
    // then), else the built-in one; never one given now.
    if (lists.framework)
        fmt::print(stderr, "lotus-bpf: {}'s \"framework\" is not used: a replay reconstructs with the knowledge the "
                           "capture ran with\n", opts.rules_file);
    lists.framework = meta.contains("framework") ? std::make_shared<const model::framework::Framework>(
                                                       parse_framework(meta["framework"], opts.replay))
                                                 : nullptr;
    Outputs outputs(opts);
    Reconstruction rec(opts, outputs, std::move(lists), in.header().t0_ns, strings("counters"));
    // The stream as it was captured, into the engine (the records capture added included); only the end
    // record's counts are the session's.
    std::vector<uint8_t> record;
    StreamCounts counts;
    uint64_t records = 0, last_ns = in.header().t0_ns;
    while (in.next(record)) {
        counts.ended_now = false;
        model::dispatch(record.data(), record.size(), counts);
        if (counts.ended_now)
            continue;
        records++;
        last_ns = std::max<uint64_t>(last_ns, reinterpret_cast<const lotus_event_header*>(record.data())->ts_ns);
        rec.consume(record.data(), record.size());
    }
    uint64_t events = records - counts.added, captured = counts.captured, lost = counts.lost;
    bool ended = counts.ended;
    auto str = [&](const char* k) {
        return meta.contains(k) && meta[k].is_string() ? meta[k].get<std::string>() : std::string("?");
    };
    exporter::RunInfo run;
    run.tool = "lotus-bpf " LOTUS_VERSION;
    run.target_pid = in.header().root_pid;
    run.t0_monotonic_ns = in.header().t0_ns;
    run.python = str("python");
    run.interpreter = str("interpreter");
    run.layout = str("layout");
    if (meta.contains("cpus") && meta["cpus"].is_number_unsigned())
        run.cpus = meta["cpus"].get<unsigned>();
    if (meta.contains("resources_interval_ms") && meta["resources_interval_ms"].is_number_unsigned())
        run.resources_interval_ms = meta["resources_interval_ms"].get<unsigned>();
    run.events = captured ? captured : events;
    run.lost_events = lost;
    run.stop_reason = "replayed " + opts.replay;
    if (!ended) // the session writes its end record as tracing stops: the file ends before the run did
        run.stop_reason += fmt::format(", which has no end record: its writing stopped before the run ended (as "
                                       "a cut at --disk-reserve does), so these figures cover its first {:.2f} s only",
                                       static_cast<double>(last_ns - in.header().t0_ns) / 1e9);
    run.tracer_peak_rss_kb = peak_rss_kb();
    run.tracer_cpu_ms = cpu_ms();
    bool all_calls = meta.contains("all_calls") && meta["all_calls"].is_boolean() && meta["all_calls"].get<bool>();
    // A version the table does not know is taken as inlining, as every version since 3.11 does.
    auto version = cpython::parse_version(run.python);
    auto caps = version ? cpython::caps_for(*version) : std::nullopt;
    bool inlined = calls_inlined(caps.value_or(cpython::VersionCaps{}), all_calls);
    return rec.finish(std::move(run), inlined) ? 0 : kExitOutputFailed;
}

} // namespace lotus::cli
