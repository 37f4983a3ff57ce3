// The summary's perf-counter table and native map (Summary members kept apart from the op statistics).
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

void Summary::print_counters(FILE* out) const
{
    auto rows = counter_rows();
    if (rows.empty())
        return;
    std::string head = fmt::format("\n{:<28} {:>8}", "counters per call (mean)", "count");
    for (const auto& n : counter_names_)
        head += fmt::format(" {:>16}", clock_counter(n) ? n + " ms" : n);
    head += fmt::format(" {:>6} {:>8}", "IPC", "on-CPU %");
    fmt::print(out, "{}\n", head);
    for (const auto& r : rows) {
        std::string line = fmt::format("{:<28} {:>8}", r.label(), r.count);
        for (size_t k = 0; k < r.mean.size(); k++)
            line += clock_counter(counter_names_[k]) ? fmt::format(" {:>16.3f}", r.mean[k] / 1e6)
                                                     : fmt::format(" {:>16.1f}", r.mean[k]);
        line += fmt::format(" {:>6} {:>8}", r.ipc < 0 ? "-" : fmt::format("{:.2f}", r.ipc),
                            r.on_cpu_pct < 0 ? "-" : fmt::format("{:.0f}", r.on_cpu_pct));
        fmt::print(out, "{}\n", line);
    }
    print_wrapped(out, "(counts are per call of the op; IPC: instructions per cycle, where the PMU counts both; "
                       "on-CPU %: the thread's time on a CPU over the call's wall time)");
}

void Summary::print_native_map(FILE* out) const
{
    if (native_map_.empty())
        return;
    fmt::print(out, "\n");
    print_wrapped(out, "native map: in which native functions each op's time went (share of the CPU samples taken "
                       "inside it; docs/native-map.md)");
    for (const auto& op : native_map_) {
        double n = static_cast<double>(op.samples);
        fmt::print(out, "  {}: {} samples, {:.0f} % named, {:.0f} % in the kernel\n", op.op, op.samples,
                   100.0 * static_cast<double>(op.named) / n, 100.0 * static_cast<double>(op.in_kernel) / n);
        size_t shown = 0;
        for (const auto& f : op.functions) {
            if (shown++ == 6)
                break;
            fmt::print(out, "    {:>5.1f} %  {:<56} {}\n", 100.0 * static_cast<double>(f.samples) / n,
                       f.function.size() > 56 ? f.function.substr(0, 53) + "..." : f.function, f.library);
        }
    }
}

nlohmann::ordered_json Summary::counters_json_value() const
{
    using J = nlohmann::ordered_json;
    J ops = J::object();
    for (const auto& r : counter_rows()) {
        J mean = J::object();
        for (size_t k = 0; k < r.mean.size(); k++)
            mean[common::valid_utf8(counter_names_[k])] = json_fixed(r.mean[k], 3);
        J o = J::object();
        o["count"] = r.count;
        o["mean"] = std::move(mean);
        o["ipc"] = r.ipc < 0 ? J(nullptr) : json_fixed(r.ipc, 4);
        o["on_cpu_pct"] = json_fixed(r.on_cpu_pct, 2);
        ops[common::valid_utf8(r.op)] = std::move(o);
    }
    J out = J::object();
    out["names"] = json_texts(counter_names_);
    out["ops"] = std::move(ops);
    return out;
}

std::string Summary::counters_json() const { return json_dump(counters_json_value()); }

nlohmann::ordered_json Summary::native_map_json_value() const
{
    using J = nlohmann::ordered_json;
    J ops = J::array();
    for (const auto& op : native_map_) {
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

std::string Summary::native_map_json() const { return json_dump(native_map_json_value()); }

} // namespace lotus::exporter
