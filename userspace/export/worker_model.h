// The "how many DataLoader workers" estimate (docs/worker-estimate.md): a model of one training loop's pipeline
// built on figures measured in the run, that gives its samples/s for any number of workers. Per pass (epoch):
// its first batches (the workers start and prepare one each, n at once: that time scaled by the CPUs they
// share), then its other samples at the steady rate, the smallest of three bounds:
//   workers: N / w          w: a worker's time per sample with a CPU to itself (its batches' time, less the
//                              share it waited for a CPU, as its loadings' and pipeline calls' on-CPU times say;
//                              the time they blocked kept)
//   CPUs:    C / c          c: the job's CPU per sample (the workers' and the training process's), C the CPUs
//                              the job may use less those the host's other processes (this tracer's included)
//                              took on them meanwhile
//   loop:    1 / m          m: the training loop's own time per sample (its time not waiting in next())
// and the time between passes as measured. Computed from spans and usage readings only (a replay gives the same).
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/spans.h"
#include "model/usage.h"

namespace lotus::exporter {

// What one training loop's run measured, as the model takes it.
struct ModelInputs {
    unsigned workers = 0;        // today's (distinct worker ids that prepared batches)
    double cpus = 0;             // the CPUs the job may use
    double others_cpus = -1;     // CPUs of those that other processes used while it consumed batches; -1 unknown
    double usable_cpus() const { return others_cpus > 0 ? std::max(0.25, cpus - others_cpus) : cpus; } // C
    uint64_t samples = 0;        // in its workers' batches
    unsigned passes = 0;
    double seconds = 0;          // its passes' time: the first batch's start to the last batch's end
    double first_batch_s = 0;    // summed over passes: each pass's start to its first batch's end
    uint64_t first_samples = 0;  // those first batches' samples (one batch per pass)
    double gaps_s = 0;           // summed: a pass's last batch's end to the next pass's first batch's start
    double worker_s = 0;         // w
    double worker_cpu_s = 0;     // the workers' CPU per sample: their processes' whole CPU time where read (else
                                 // their batches' time on a CPU), over their samples
    bool worker_cpu_read = false;
    double on_cpu_share = 0;     // the workers' samples' on-CPU share while runnable (no voluntary switch)
    double main_cpu_s = 0;       // the training process's CPU per sample while it consumed batches
    bool main_cpu_read = false;  // from its usage readings (else its loop time, an upper bound)
    double loop_s = 0;           // m
    double cpu_s() const { return worker_cpu_s + main_cpu_s; } // c
};

enum class Bound : uint8_t { Workers, Cpus, Loop };
const char* bound_name(Bound b); // "workers", "cpus", "loop"

struct ModelPoint {
    unsigned workers = 0;
    double samples_per_s = 0;
    double steady_per_s = 0; // the steady rate within a pass
    Bound bound = Bound::Workers;
};

struct WorkerModel {
    ModelInputs in;
    double measured_per_s = 0;       // today's: samples over seconds
    std::vector<ModelPoint> curve;   // 1 worker up to max_workers
    unsigned suggested = 0;          // the fewest workers within 5 % of the curve's best
    const ModelPoint* at(unsigned workers) const;
};

// The model's curve from its inputs, for 1 to max_workers workers.
WorkerModel worker_model(const ModelInputs& in, unsigned max_workers);

// Gathers ModelInputs per training loop: its workers' batches and samples (spans), its waits, and its main
// process's CPU readings.
class ModelFigures {
public:
    void add(const model::Span& s);
    void usage(const model::UsagePoint& p);
    void host(const model::RecordHostCpu& h);
    void fold(uint32_t pid, uint32_t into); // an exited process's row folded into another (Engine::FoldSink)
    // The inputs for the loop of `owner`, with `cpus` CPUs; none where it had no worker batches or its samples
    // carried no on-CPU times (then w cannot be told from the waiting for a CPU). processes and usage (null: no
    // readings) give its workers' exact CPU time, and the exits the readings missed the end of.
    std::optional<ModelInputs> inputs(uint32_t owner, double cpus, const std::map<uint32_t, model::ProcessInfo>& processes,
                                      const std::map<uint32_t, model::ProcessUsage>* usage) const;

private:
    struct Pass {
        uint64_t start = UINT64_MAX, first_end = UINT64_MAX, end = 0, first_samples = 0;
    };
    struct Loop {
        std::map<std::pair<int, int64_t>, Pass> passes; // by (DataLoader, epoch)
        std::map<int, bool> worker_ids;
        uint64_t samples = 0, batches = 0;
        double batch_s = 0;
        // The workers' loadings and pipeline calls (those with counters): without a voluntary switch, with one.
        double free_cpu_s = 0, free_wall_s = 0;
        double blocked_cpu_s = 0, blocked_wall_s = 0;
        uint64_t timed_samples = 0;
        uint64_t wait_start = UINT64_MAX, wait_end = 0;
        double wait_s = 0;
        // At the last reading before its first wait's start, and at the latest before its latest wait's end.
        struct Mark {
            double ts = 0, main = 0, job = 0, host_ts = 0, host_busy = 0;
        };
        bool marked = false;
        Mark start, end;
    };
    struct Cpu {
        double total = 0; // CPU seconds summed over its readings
        double ts = 0;    // the latest reading's time, s
        double prev_total = 0, prev_ts = 0;
    };
    Loop::Mark mark(uint32_t owner, uint64_t before_ns) const;
    std::map<uint32_t, Loop> loops_;
    std::map<uint32_t, Cpu> cpu_; // per process seen in readings
    Cpu job_;                     // all of them
    Cpu host_busy_;               // the host's CPUs (RecordHostCpu)
    bool have_host_ = false;
};

} // namespace lotus::exporter
