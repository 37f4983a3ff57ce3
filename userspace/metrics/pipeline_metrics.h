// The run as Prometheus metrics (--metrics): counters and histograms fed the spans as they end and the resource
// readings as they come, in a prometheus-cpp registry that an endpoint (endpoint.h) serves. Pure: no HTTP, no
// capture; the unit tests read it back through the text serializer.
//
// Labels stay bounded: the node, the training process's global rank (RANK) and local rank, the DataLoader's
// number, the worker id, the op's row name (at most kMaxOpsPerJob a job) and the process role; never a pid (but in lotus_job_info and the
// agent's per-job labels), a path or a batch or sample id. docs/metrics.md lists the families.
//
// Several PipelineMetrics may share one registry (the agent: one per job). A series whose labels equal another
// owner's is the same prometheus-cpp object, owned by both (the registry counts its owners: shared_registry.h):
// remove_series takes out only what no other owner holds, so one job's end never frees what another still writes.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "model/batches.h"
#include "model/spans.h"
#include "model/usage.h"
#include "shared_registry.h"

namespace lotus::metrics {

// Label values as Prometheus takes them: valid UTF-8 (an invalid byte or a control character becomes U+FFFD),
// at most kMaxLabelBytes (longer ones cut at a character, ending in "…").
constexpr size_t kMaxLabelBytes = 128;
std::string label_value(std::string_view v);

// The op and function label values one job may have: their names come from the target (its classes, its
// functions), so past this many distinct names per job a span counts in one series labelled "other" instead, and
// lotus_label_values_folded_total counts the names folded.
constexpr size_t kMaxOpsPerJob = 64, kMaxFunctionsPerJob = 64;
constexpr const char* kOtherLabel = "other";

// 10 µs to 10 s, 1-2.5-5 per decade: what a transform, a batch and a wait take.
const prometheus::Histogram::BucketBoundaries& duration_buckets();

// What every series of one traced job carries, and what its info series says.
struct JobIdentity {
    std::string node;              // the hostname, or --node
    std::string version;           // lotus-bpf's
    std::string python;            // the job's CPython version
    uint32_t pid = 0;              // the traced job's pid: in lotus_job_info only
    prometheus::Labels labels;     // more labels on every series of this job (the agent's per-job labels)
};

// The capture's own figures, as the session reads them from the probe.
struct CaptureFigures {
    uint64_t events = 0, lost = 0;
    std::vector<std::pair<std::string, uint64_t>> failures; // BPF failure paths by name (capture/bpf_failures.h)
};

class PipelineMetrics {
public:
    PipelineMetrics(std::shared_ptr<SharedRegistry> registry, JobIdentity job);
    ~PipelineMetrics(); // (its series stay in the registry: the endpoint serves the final figures)
    PipelineMetrics(const PipelineMetrics&) = delete;
    PipelineMetrics& operator=(const PipelineMetrics&) = delete;

    // A span as it ends; processes: the engine's table, for the labels of its training process and worker.
    void span(const model::Span& s, const std::map<uint32_t, model::ProcessInfo>& processes);
    // A process's resource reading over an interval: its CPU time into its role's counter, its RSS kept.
    void usage(const model::UsagePoint& p, const std::map<uint32_t, model::ProcessInfo>& processes);
    // The gauges recomputed: resident memory and processes per role, the info series, and with `batches` (the
    // engine's) each training loop's waiting share and graded verdict so far, as the summary computes them
    // (exporter::loop_figures). Call after a sweep.
    void refresh(const std::map<uint32_t, model::ProcessInfo>& processes, const model::BatchTracker* batches = nullptr);
    // The capture's counts so far (monotonic).
    void capture(const CaptureFigures& f);
    // How many of the job's processes are stuck now (model::StuckWatch).
    void stuck(size_t n);
    // Every series this job added, out of the registry (the agent, a while after the job ended), but those that
    // another PipelineMetrics of equal labels still holds.
    void remove_series();

private:
    static JobIdentity clean(JobIdentity job); // its label values through label_value
    void release_all(bool remove);
    // The labels of a training process: its global rank and local rank ("" where unknown).
    struct Trainer {
        std::string rank, local_rank;
    };
    Trainer trainer(uint32_t pid, const std::map<uint32_t, model::ProcessInfo>& processes) const;
    prometheus::Labels role_labels(uint32_t pid, const std::map<uint32_t, model::ProcessInfo>& processes) const;
    prometheus::Labels with_job(prometheus::Labels l) const;
    // A span's op or function name as its label: its own among the job's first `bound` distinct names, else
    // kOtherLabel (counted once per name folded, under `label`).
    struct BoundedNames {
        std::unordered_set<std::string> named;
        std::unordered_set<size_t> folded; // (hashes: a target's names are unbounded)
    };
    std::string bounded(BoundedNames& names, size_t bound, const char* label, std::string value);
    prometheus::Histogram& histogram(prometheus::Family<prometheus::Histogram>& f, const prometheus::Labels& l);
    prometheus::Counter& counter(prometheus::Family<prometheus::Counter>& f, const prometheus::Labels& l);
    void bump(prometheus::Family<prometheus::Counter>& f, const prometheus::Labels& l, uint64_t total, uint64_t& last);
    void loops(const model::BatchTracker& batches, const std::map<uint32_t, model::ProcessInfo>& processes);

    std::shared_ptr<SharedRegistry> registry_;
    JobIdentity job_;
    prometheus::Family<prometheus::Counter>&samples_, &consumed_, &out_of_order_, &events_, &lost_, &failures_, &cpu_,
        &folded_;
    prometheus::Family<prometheus::Histogram>&ops_, &loads_, &collates_, &sample_durations_, &batches_, &waits_,
        &delays_, &functions_;
    prometheus::Family<prometheus::Gauge>&rss_, &processes_, &info_, &wait_ratio_, &grade_, &stuck_;
    // Series by their labels' text: a span's metric is found without building the family's label map twice.
    template <typename T>
    struct Series {
        prometheus::Family<T>* family;
        T* metric;
    };
    std::unordered_map<std::string, Series<prometheus::Histogram>> histograms_;
    std::unordered_map<std::string, Series<prometheus::Counter>> counters_;
    BoundedNames ops_named_, functions_named_;
    uint64_t events_seen_ = 0, lost_seen_ = 0;
    std::map<std::string, uint64_t> failures_seen_;
    std::map<uint32_t, uint64_t> rss_bytes_; // per live process, its last reading
    // A worker's CPU read before its worker id was known (its first task read, before the walk that finds the id):
    // kept until it is, so that a known worker's start is not counted under worker "?" (the id's, at its exit).
    std::map<uint32_t, double> cpu_unnamed_;
    std::map<std::string, Series<prometheus::Gauge>> gauges_; // every gauge set since the start, by key
    std::map<std::string, prometheus::Gauge*> info_series_; // the info series set, by key
    struct LoopGauges {
        prometheus::Gauge *wait_ratio = nullptr, *grade = nullptr;
    };
    std::map<std::string, LoopGauges> loop_series_; // each training loop's (by its labels' key)
};

} // namespace lotus::metrics
