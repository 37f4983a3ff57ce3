// BatchTracker: the passes in flight at attach joined to the loader they belong to, from the objects described.
#include "batches.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace lotus::model {

void BatchTracker::described(const RecordObject& r)
{
    auto c = consumers_.find(r.tgid);
    if (c == consumers_.end())
        return;
    auto text = [](const char* s, size_t n) { return std::string(s, strnlen(s, n)); };
    Holds h{true, false, r.ts_ns, r.dataset, r.sampler,
            text(r.dataset_class, sizeof(r.dataset_class)) + "\n" + text(r.dataset_root, sizeof(r.dataset_root)) +
                "\n" + text(r.sampler_class, sizeof(r.sampler_class))};
    if (r.kind == kObjectLoader) {
        auto id = c->second.loader_ids.find(r.object);
        if (id == c->second.loader_ids.end())
            return;
        c->second.loader_reading[r.object] = h;
        LoaderName name{std::string(r.dataset_class, strnlen(r.dataset_class, sizeof(r.dataset_class))),
                        std::string(r.dataset_root, strnlen(r.dataset_root, sizeof(r.dataset_root)))};
        if (!name.dataset_class.empty())
            loader_names_[{r.tgid, id->second}] = name;
    } else if (r.kind == kObjectIterator) {
        auto it = c->second.iterators.find(r.object);
        if (it != c->second.iterators.end() && epochs_[it->second].asked && epochs_[it->second].asked_ns <= r.ts_ns)
            epochs_[it->second].holds = h;
    }
}

// The DataLoader that the passes in flight at attach (iterators first met in next()) of one training process
// belong to: the one loader iterated while traced whose dataset and sampler are the objects each of them held.
// Their figures are counted together, so all must name that one loader. Never a guess: else why not.
BatchTracker::Join BatchTracker::join_partial(uint32_t owner, const Consumer& c) const
{
    int found = -1;
    auto readings = loader_readings(owner, c);
    for (const auto& ep : epochs_) {
        if (ep.owner != owner || ep.loader >= 0)
            continue;
        const Holds& h = ep.holds;
        if (!h.read)
            return {-1, "what its iterator holds was not read (a record file made before lotus-bpf read it, or an "
                        "interpreter whose object layout it does not know)"};
        if (!h.dataset || !h.sampler)
            return {-1, "what its iterator holds could not be read"};
        if (!h.trusted)
            return {-1, "its iterator was read after its last next() ended (it may have gone)"};
        std::vector<int> match;
        for (const auto& [obj, id] : c.loader_ids) {
            const auto& of = readings[id];
            // A loader whose holdings were not read while it ran could hold these very objects: no join then.
            if (of.empty())
                return {-1, fmt::format("what DataLoader {} holds was not read while it ran: it could be that one", id)};
            if (std::any_of(of.begin(), of.end(), [&](const Holds* lh) { return lh->same(h); }))
                match.push_back(id);
        }
        std::sort(match.begin(), match.end());
        if (match.empty())
            return {-1, "no DataLoader iterated while traced holds its dataset and sampler"};
        if (match.size() > 1)
            return {-1, fmt::format("DataLoaders {} and {} hold the same dataset and sampler: it could be either",
                                    match[0], match[1])};
        if (found >= 0 && found != match[0])
            return {-1, fmt::format("iterators of DataLoaders {} and {} were both in flight: their batches are counted "
                                    "together",
                                    found, match[0])};
        found = match[0];
    }
    return {found, ""};
}

// Per loader number of one training process, its trusted readings: of the DataLoader while its __iter__ ran, and
// of its passes' iterators while their next() ran (an iterator holds its loader's dataset and index sampler).
std::map<int, std::vector<const BatchTracker::Holds*>> BatchTracker::loader_readings(uint32_t owner,
                                                                                    const Consumer& c) const
{
    std::map<int, std::vector<const Holds*>> out;
    for (const auto& [obj, lh] : c.loader_holds)
        if (lh.trusted)
            out[c.loader_ids.at(obj)].push_back(&lh);
    for (const auto& ep : epochs_)
        if (ep.owner == owner && ep.loader >= 0 && ep.holds.read && ep.holds.trusted)
            out[ep.loader].push_back(&ep.holds);
    return out;
}

void BatchTracker::apply_join(uint32_t owner, int loader)
{
    for (auto& ep : epochs_)
        if (ep.owner == owner && ep.loader < 0)
            ep.loader = loader;
    auto partial = stats_.find({owner, -1});
    BatchStats& into = stats_[{owner, loader}];
    into.joined_partial = true;
    if (partial != stats_.end()) {
        into.partial_batches += partial->second.wait_ns.count();
        into.merge(partial->second);
        stats_.erase(partial);
    }
    // Its workers: those of the owner whose epoch was never known (alive at attach) or is one of these.
    for (auto& [pid, p] : processes_) {
        auto e = worker_epoch_.find(pid);
        bool of_pass = e == worker_epoch_.end() || (epochs_[e->second].owner == owner && epochs_[e->second].loader == loader);
        if (p.owner == owner && p.loader < 0 && (p.worker || p.worker_id >= 0) && of_pass)
            p.loader = loader;
    }
}

} // namespace lotus::model
