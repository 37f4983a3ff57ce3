// A Prometheus registry that several PipelineMetrics may share (the agent: one per job), with who holds each of its
// metrics. prometheus-cpp's Family::Add returns the metric already there for an equal label set, so two jobs with
// equal labels (two the agent cannot tell apart: docs/metrics.md) get the same object; each counts as one owner, and
// the metric leaves its family only with its last owner. Add and the count go under one lock, so that no owner takes
// a metric that another's last release is removing. The table belongs to the registry whose metrics it counts.
#pragma once
#include <mutex>
#include <unordered_map>
#include <utility>

#include <prometheus/family.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

namespace lotus::metrics {

class SharedRegistry : public prometheus::Registry {
public:
    // The metric of family f with labels l (made with args where new), one owner more.
    template <typename T, typename... A>
    T* acquire(prometheus::Family<T>& f, const prometheus::Labels& l, A&&... args)
    {
        std::lock_guard lock(mu_);
        T* m = &f.Add(l, std::forward<A>(args)...);
        ++owners_[m];
        return m;
    }

    // One owner less; the last one's release takes the metric out of its family (remove: false, when an owner goes
    // without removing its series: they stay in the registry as they are, but its claim goes, so that no stale
    // count is left for another metric that later gets the same address).
    template <typename T>
    void release(prometheus::Family<T>& f, T* m, bool remove = true)
    {
        std::lock_guard lock(mu_);
        auto it = owners_.find(m);
        if (it != owners_.end() && --it->second > 0)
            return;
        if (it != owners_.end())
            owners_.erase(it);
        if (remove)
            f.Remove(m);
    }

private:
    std::mutex mu_;
    std::unordered_map<const void*, unsigned> owners_;
};

} // namespace lotus::metrics
