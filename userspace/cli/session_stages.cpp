// Session: the record stream's stage chain. Each record from the ring buffer is completed, seen by the native
// capture, written to the record file and read by the engine; capture's own records join it at the same place.
#include "live_session.h"

#include <cstring>

#include "common/knobs.h"
#include "cpython/cpython_layouts.h"
#include "proc/proc_maps.h"

namespace lotus::cli {

using common::monotonic_ns;

void Session::build_pipeline()
{
    completion_ = std::make_unique<capture::Completion>(interp_.layout, tree_);
    requests_ = std::make_unique<capture::EngineRequests>(opts_.trainer_calls);
    rec_ = std::make_unique<Reconstruction>(opts_, *outputs_, std::move(lists_), t0_, counter_names_, requests_.get());
    rec_->set_node_of([node = node_name(opts_)](uint32_t) { return node; }, false); // (one node: the labels say none)
    if (auto objects = cpython::object_layout_for(interp_.version)) {
        object_reads_ = std::make_unique<capture::ObjectReads>(interp_.layout, *objects);
        requests_->set_object_reads(object_reads_.get());
    }
    pss_schedule_.emplace(opts_.pss_interval_ms, cpus_, t0_);
    interpreters_ = std::make_unique<capture::InterpreterWatch>(
        interp_, [this](const void* data, size_t len) { feed(data, len); }); // Python processes no probe sees
    if (common::knob_value("LOTUS_DEBUG_EVENTS"))
        debug_.emplace(rec_->rules().framework());
    stuck_ = std::make_unique<LiveStuck>(opts_.stuck_after_s, t0_, [this](const void* data, size_t len) { feed(data, len); });
    rec_->observe([this](const model::Span& s) { stuck_->span(s); });
    if (registry_) {
        metrics_ = std::make_shared<metrics::PipelineMetrics>(
            registry_, metrics::JobIdentity{node_name(opts_), LOTUS_VERSION, interp_.version.str(),
                                            static_cast<uint32_t>(root_),
                                            prometheus::Labels(opts_.metrics_labels.begin(), opts_.metrics_labels.end())});
        rec_->observe([this](const model::Span& s) { metrics_->span(s, rec_->engine().processes()); });
        rec_->observe_usage([this](const model::UsagePoint& p) { metrics_->usage(p, rec_->engine().processes()); });
    }
}

// Every record, the kernel's and capture's own, goes to the record file and the engine alike; then what capture
// learnt from the target while the engine read it (locals' slots).
void Session::feed(const void* data, size_t len)
{
    if (recorder_)
        recorder_->write(data, len);
    rec_->consume(data, len);
    for (auto slots = roles_->take(); !slots.empty(); slots = roles_->take())
        for (const auto& rs : slots) {
            if (recorder_)
                recorder_->write(&rs, sizeof(rs));
            rec_->consume(&rs, sizeof(rs));
        }
    for (auto reads = object_reads_ ? object_reads_->take() : std::vector<model::RecordObject>{}; !reads.empty();
         reads = object_reads_->take())
        for (const auto& ro : reads) {
            if (recorder_)
                recorder_->write(&ro, sizeof(ro));
            rec_->consume(&ro, sizeof(ro));
        }
}

// A record from the ring buffer: completed, then seen by the native capture (symbol records go first: the
// sample's names), then into the stream.
void Session::on_record(const void* raw, size_t raw_len)
{
    delivered_++;
    lotus_sample unwound;
    if (raw_len >= sizeof(lotus_sample_stack) &&
        static_cast<const lotus_event_header*>(raw)->type == LOTUS_EV_SAMPLE_STACK) { // its copy stops here
        if (!native_)
            return;
        unwound = native_->unwound(*static_cast<const lotus_sample_stack*>(raw), opts_.sample_stack);
        raw = &unwound, raw_len = sizeof(unwound);
    }
    auto [data, len] = completion_->complete(raw, raw_len);
    if (debug_)
        debug_->print(data, len);
    if (native_)
        native_->on_event(data, len);
    feed(data, len);
    model::dispatch(data, len, exec_watch_);
}

// RANK from a process's environment, and its command line (a helper's role), into the stream (the record file
// keeps them for replays).
void Session::started_as(uint32_t pid)
{
    model::RecordCommand c{model::kRecordCommand, pid, pid, 0, monotonic_ns(), {}};
    std::string line = proc::command_line(static_cast<int>(pid));
    memcpy(c.command, line.data(), std::min(line.size(), sizeof(c.command) - 1));
    if (!line.empty())
        feed(&c, sizeof(c));
    auto rank = proc::env_int(static_cast<int>(pid), "RANK");
    if (!rank)
        return;
    model::RecordRank r{model::kRecordRank, pid, pid, 0, monotonic_ns(), *rank,
                        proc::env_int(static_cast<int>(pid), "LOCAL_RANK").value_or(-1),
                        proc::env_int(static_cast<int>(pid), "WORLD_SIZE").value_or(-1), 0};
    feed(&r, sizeof(r));
}

void Session::known(uint32_t pid, uint32_t parent, bool is_root)
{
    model::RecordProcess rp{model::kRecordProcess, pid, 0, 0, 0, parent, is_root};
    feed(&rp, sizeof(rp));
}

} // namespace lotus::cli
