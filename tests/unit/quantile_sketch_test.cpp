#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "common/quantile_sketch.h"

using lotus::common::QuantileSketch;

namespace {

double exact_quantile(const std::vector<uint64_t>& sorted, double q)
{
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    rank = std::clamp<size_t>(rank, 1, sorted.size());
    return static_cast<double>(sorted[rank - 1]);
}

const double kQuantiles[] = {0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1};

// Every quantile of `sketch` within the stated relative error of the exact one of `values`, and count, total,
// mean, min and max exact.
void expect_within_bound(const QuantileSketch& sketch, std::vector<uint64_t> values)
{
    std::sort(values.begin(), values.end());
    ASSERT_EQ(sketch.count(), values.size());
    uint64_t total = 0;
    for (auto v : values)
        total += v;
    EXPECT_EQ(sketch.total_exact(), total);
    EXPECT_DOUBLE_EQ(sketch.mean(), static_cast<double>(total) / static_cast<double>(values.size()));
    EXPECT_EQ(sketch.min(), values.front());
    EXPECT_EQ(sketch.max(), values.back());
    for (double q : kQuantiles) {
        double want = exact_quantile(values, q), got = sketch.quantile(q);
        EXPECT_LE(std::abs(got - want), QuantileSketch::kRelativeError * want) << "q " << q << " want " << want;
    }
}

} // namespace

TEST(QuantileSketch, ExactWhileSmall)
{
    QuantileSketch s;
    EXPECT_EQ(s.quantile(0.5), 0);
    std::vector<uint64_t> v;
    for (uint64_t i = QuantileSketch::kExactLimit; i > 0; i--) {
        s.add(i * 1000);
        v.push_back(i * 1000);
    }
    EXPECT_TRUE(s.exact());
    EXPECT_EQ(s.buckets(), 0u);
    std::sort(v.begin(), v.end());
    for (double q : kQuantiles)
        EXPECT_EQ(s.quantile(q), exact_quantile(v, q)) << q;
}

// Random data of several shapes, far past the exact limit: every quantile within 1 % of the exact one.
TEST(QuantileSketch, QuantilesWithinOnePercentOfRandomData)
{
    std::mt19937_64 rng(59);
    struct Shape {
        const char* name;
        std::function<uint64_t()> draw;
    };
    std::lognormal_distribution<double> lognormal(std::log(2e6), 1.5); // ~2 ms, heavy-tailed
    std::uniform_int_distribution<uint64_t> uniform(1000, 5'000'000);  // 1 us .. 5 ms
    std::exponential_distribution<double> expo(1.0 / 50e6);            // mean 50 ms
    std::uniform_int_distribution<uint64_t> tiny(0, 40);                // a few ns, zeros among them
    std::uniform_int_distribution<uint64_t> wide(0, 12);                // 1 ns .. 1e12 ns, decade by decade
    std::vector<Shape> shapes = {
        {"lognormal", [&] { return static_cast<uint64_t>(lognormal(rng)); }},
        {"uniform", [&] { return uniform(rng); }},
        {"exponential", [&] { return static_cast<uint64_t>(expo(rng)); }},
        {"tiny", [&] { return tiny(rng); }},
        {"wide", [&] { return static_cast<uint64_t>(std::pow(10.0, static_cast<double>(wide(rng)))) + tiny(rng); }},
        {"bimodal", [&] { return rng() % 10 ? 100'000 + rng() % 1000 : 800'000'000 + rng() % 1'000'000; }},
    };
    for (auto& shape : shapes) {
        SCOPED_TRACE(shape.name);
        QuantileSketch s;
        std::vector<uint64_t> v;
        for (int i = 0; i < 200'000; i++) {
            uint64_t x = shape.draw();
            s.add(x);
            v.push_back(x);
        }
        EXPECT_FALSE(s.exact());
        expect_within_bound(s, v);
    }
}

TEST(QuantileSketch, BoundedMemoryOverTheWholeRange)
{
    QuantileSketch s;
    for (int k = 0; k < 64; k++)
        for (int i = 0; i < 100; i++)
            s.add((uint64_t{1} << k) + static_cast<uint64_t>(i));
    s.add(UINT64_MAX);
    s.add(0);
    // Every uint64 value in ~2,250 counters, however many values.
    EXPECT_LE(s.buckets(), 2300u);
    size_t before = s.buckets();
    for (int i = 0; i < 1'000'000; i++)
        s.add(1 + static_cast<uint64_t>(i) % 1'000'000'000);
    EXPECT_EQ(s.buckets(), before);
    EXPECT_EQ(s.max(), UINT64_MAX);
    EXPECT_EQ(s.min(), 0u);
    EXPECT_EQ(s.quantile(0), 0);
}

TEST(QuantileSketch, MergeKeepsTheBound)
{
    std::mt19937_64 rng(7);
    std::lognormal_distribution<double> a(std::log(1e6), 1.0), b(std::log(3e7), 0.5);
    for (size_t n : {size_t{100}, size_t{600}, size_t{50'000}}) { // exact + exact, exact into buckets, buckets
        QuantileSketch x, y;
        std::vector<uint64_t> all;
        for (size_t i = 0; i < n; i++) {
            uint64_t u = static_cast<uint64_t>(a(rng)), w = static_cast<uint64_t>(b(rng));
            x.add(u);
            y.add(w);
            all.push_back(u);
            all.push_back(w);
        }
        x.merge(y);
        EXPECT_EQ(x.exact(), 2 * n <= QuantileSketch::kExactLimit) << n;
        expect_within_bound(x, all);
    }
    QuantileSketch e, f;
    f.add(5);
    e.merge(f);
    e.merge(QuantileSketch{});
    EXPECT_EQ(e.count(), 1u);
    EXPECT_EQ(e.quantile(0.5), 5);
}
