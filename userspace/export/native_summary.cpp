// The summary's perf-counter table and native map (kept apart from the op statistics), and their JSON.
#include "summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "export/json.h"

namespace lotus::exporter {

void Summary::set_native_map(std::vector<model::OpNativeMap> map)
{
    // Ops (and --span functions) first, then the parts around them (model::Claim's order).
    std::stable_sort(map.begin(), map.end(), [](const auto& a, const auto& b) { return a.claim < b.claim; });
    native_map_ = std::move(map);
}

bool clock_counter(const std::string& name) { return name == "task-clock" || name == "cpu-clock"; }

std::vector<CounterRow> Summary::counter_rows() const
{
    std::vector<CounterRow> out;
    if (counter_names_.empty())
        return out;
    int cycles = -1, instructions = -1;
    for (size_t k = 0; k < counter_names_.size(); k++) {
        if (counter_names_[k] == "cycles")
            cycles = static_cast<int>(k);
        if (counter_names_[k] == "instructions")
            instructions = static_cast<int>(k);
    }
    std::vector<std::pair<Part, std::string>> names; // ops and samples have counters
    for (const auto& name : all_.order)
        names.emplace_back(Part::Op, name);
    names.emplace_back(Part::Sample, "sample");
    for (const auto& [part, name] : names) {
        auto it = all_.counters.find(name);
        if (it == all_.counters.end() || !it->second.count)
            continue;
        const auto& c = it->second;
        CounterRow row{part, name, c.count, {}, -1, -1};
        for (size_t k = 0; k < counter_names_.size() && k < model::kMaxPerfCounters; k++)
            row.mean.push_back(static_cast<double>(c.perf[k]) / static_cast<double>(c.count));
        if (cycles >= 0 && instructions >= 0 && c.perf[cycles])
            row.ipc = static_cast<double>(c.perf[instructions]) / static_cast<double>(c.perf[cycles]);
        if (c.wall_ns)
            row.on_cpu_pct = 100.0 * static_cast<double>(c.cpu_ns) / static_cast<double>(c.wall_ns);
        out.push_back(std::move(row));
    }
    return out;
}

nlohmann::ordered_json counters_json_value(const std::vector<std::string>& names, const std::vector<CounterRow>& rows)
{
    using J = nlohmann::ordered_json;
    J ops = J::object();
    for (const auto& r : rows) {
        J mean = J::object();
        for (size_t k = 0; k < r.mean.size(); k++)
            mean[common::valid_utf8(names[k])] = json_fixed(r.mean[k], 3);
        J o = J::object();
        o["count"] = r.count;
        o["mean"] = std::move(mean);
        o["ipc"] = r.ipc < 0 ? J(nullptr) : json_fixed(r.ipc, 4);
        o["on_cpu_pct"] = json_fixed(r.on_cpu_pct, 2);
        ops[common::valid_utf8(r.op)] = std::move(o);
    }
    J out = J::object();
    out["names"] = json_texts(names);
    out["ops"] = std::move(ops);
    return out;
}

std::string Summary::counters_json() const { return json_dump(counters_json_value(counter_names_, counter_rows())); }

nlohmann::ordered_json native_map_json_value(const std::vector<model::OpNativeMap>& map)
{
    using J = nlohmann::ordered_json;
    J ops = J::array();
    for (const auto& op : map) {
        J fns = J::array();
        for (const auto& f : op.functions) {
            J o = J::object();
            o["function"] = json_text(f.function);
            o["library"] = json_text(f.library);
            o["samples"] = f.samples;
            fns.push_back(std::move(o));
        }
        J o = J::object();
        o["op"] = json_text(op.op);
        o["samples"] = op.samples;
        o["named"] = op.named;
        o["in_kernel"] = op.in_kernel;
        o["functions"] = std::move(fns);
        ops.push_back(std::move(o));
    }
    return ops;
}

std::string Summary::native_map_json() const { return json_dump(native_map_json_value(native_map_)); }

} // namespace lotus::exporter
