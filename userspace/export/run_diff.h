// Two runs side by side (`lotus-bpf diff A B`), from their summary JSONs: throughput, the training loop's waiting
// share and verdict, per op count/mean/p50/p95 (loader, collation and the whole pipeline too), the waits and
// delays, and the job's resource use, each with its absolute and relative change. Pure: JSON in, text out.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace lotus::exporter {

std::string diff_runs(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b, const std::string& name_a,
                      const std::string& name_b);
// The same as one offline HTML page (no script, nothing fetched): the comparison, and per op its mean time per
// call in A and in B as paired bars.
std::string diff_html(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b, const std::string& name_a,
                      const std::string& name_b);

} // namespace lotus::exporter
