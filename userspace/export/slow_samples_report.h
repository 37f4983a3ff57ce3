// The slow samples (slow_samples.h) as the summary's text, its JSON and the HTML report show them.
#pragma once
#include <cstdio>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "export/slow_samples.h"

namespace lotus::exporter {

// How a sample is found slow, in words (the JSON's `rule`, the legends').
extern const char* const kSlowSampleRule;

// A short section: per DataLoader, the slow samples' count, the first kTextRows rows and the size fit.
inline constexpr size_t kTextRows = 10;
void print_slow_samples(FILE* out, const std::vector<SlowSampleGroup>& groups);
// The summary JSON's `slow_samples` object (schemas/summary.schema.json).
nlohmann::ordered_json slow_samples_json(const std::vector<SlowSampleGroup>& groups);
// The HTML report's section body: a table per DataLoader and the fit in words.
std::string slow_samples_html(const std::vector<SlowSampleGroup>& groups);

} // namespace lotus::exporter
