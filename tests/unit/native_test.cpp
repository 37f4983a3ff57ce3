// Native attribution without BPF: the sampling map's claims, the engine's native spans and sample naming
// from symbol records, and the parsing of --native / --counters and C++ names.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <map>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture/perf_events.h"
#include "lotus_abi.h"
#include "event_builder.h"
#include "model/engine.h"
#include "model/native_map.h"
#include "elf/native_functions.h"
#include "model/framework.h"
#include "elf/symbolizer.h"
#include "elf/elf_file.h"

using namespace lotus;
using model::Span;
using model::SpanKind;

namespace {

Span span(SpanKind k, const std::string& name, uint32_t tid, uint64_t start, uint64_t end)
{
    return Span::make(k, name, 1, tid, start, end);
}

const model::OpNativeMap* row(const std::vector<model::OpNativeMap>& t, const std::string& op)
{
    for (const auto& r : t)
        if (r.op == op)
            return &r;
    return nullptr;
}

} // namespace

TEST(NativeMap, OpsClaimTheirSamplesOverTheSampleAroundThemInAnyOrder)
{
    model::NativeMap m;
    m.sample(7, 100, "ImagingResample", "_imaging.so", true, false);
    m.sample(7, 150, "memcpy", "libc.so.6", true, true);
    m.sample(7, 250, "_PyEval_EvalFrameDefault", "python3.11", true, false); // between ops
    m.sample(7, 400, "[unknown]", "python3.11", false, false);               // outside every span
    m.sample(8, 120, "other_thread", "x.so", true, false);                    // another thread: never claimed
    m.span(span(SpanKind::Sample, "sample", 7, 50, 300)); // the sample arrives first here
    m.span(span(SpanKind::Op, "RandomResizedCrop", 7, 90, 200));
    m.finish();
    auto t = m.table();
    const auto* crop = row(t, "RandomResizedCrop");
    ASSERT_NE(crop, nullptr);
    EXPECT_EQ(crop->samples, 2u);
    EXPECT_EQ(crop->in_kernel, 1u);
    ASSERT_EQ(crop->functions.size(), 2u);
    const auto* between = row(t, "sample (between ops)");
    ASSERT_NE(between, nullptr);
    EXPECT_EQ(between->samples, 1u);
    EXPECT_EQ(between->functions[0].function, "_PyEval_EvalFrameDefault");
    const auto* outside = row(t, "outside any span");
    ASSERT_NE(outside, nullptr);
    EXPECT_EQ(outside->samples, 2u);
    EXPECT_EQ(outside->named, 1u);
    EXPECT_EQ(m.total(), 5u);
}

TEST(NativeMap, SettlesSamplesOnceTheyAreOlderThanTheHorizon)
{
    model::NativeMap m(1000);
    m.sample(7, 100, "f", "l", true, false);
    m.span(span(SpanKind::Loader, "loader", 7, 50, 150));
    EXPECT_EQ(m.total(), 0u); // could still be claimed
    m.span(span(SpanKind::Op, "X", 7, 5000, 6000));
    EXPECT_EQ(m.total(), 1u); // settled, memory freed
    auto t = m.table();
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].op, "loader");
}

namespace {

void symbol(model::Engine& e, uint32_t tgid, uint64_t ip, const char* name, const char* lib)
{
    model::RecordSymbol r{};
    r.type = model::kRecordSymbol;
    r.tgid = tgid;
    r.ip = ip;
    strncpy(r.name, name, sizeof(r.name) - 1);
    strncpy(r.library, lib, sizeof(r.library) - 1);
    e.consume(&r, sizeof(r));
}

void native_func(model::Engine& e, uint32_t func, const char* name, const char* lib)
{
    model::RecordNativeFunc r{};
    r.type = model::kRecordNativeFunc;
    r.func = func;
    strncpy(r.name, name, sizeof(r.name) - 1);
    strncpy(r.library, lib, sizeof(r.library) - 1);
    e.consume(&r, sizeof(r));
}

void native(model::Engine& e, uint32_t type, uint32_t tid, uint64_t ts, uint32_t func)
{
    lotus_native n{};
    n.h = {type, 1, tid, 0, ts};
    n.func = func;
    e.consume(&n, sizeof(n));
}

void sample(model::Engine& e, uint32_t tid, uint64_t ts, std::vector<uint64_t> ips)
{
    lotus_sample s{};
    s.h = {LOTUS_EV_SAMPLE, 1, tid, 0, ts};
    s.nr_ips = static_cast<uint32_t>(ips.size());
    for (size_t i = 0; i < ips.size(); i++)
        s.ip[i] = ips[i];
    e.consume(&s, sizeof(s));
}

} // namespace

TEST(EngineNative, NativeCallsBecomeSpansAndNameTheSamplesTheyHold)
{
    model::Rules rules;
    std::vector<Span> spans;
    model::Engine e(rules, [&](const Span& s) { spans.push_back(s); });
    native_func(e, 0, "at::_ops::copy_::call", "libtorch_cpu.so");
    native_func(e, 1, "ImagingResample", "_imaging.so");
    symbol(e, 1, 0x100, "", "libtorch_cpu.so");           // a hidden kernel: no symbol
    symbol(e, 1, 0x200, "ImagingResampleHorizontal_8bpc", "_imaging.so");
    symbol(e, 1, 0x300, "", "python3.11");
    symbol(e, 1, 0x310, "PyObject_Call", "python3.11");
    native(e, LOTUS_EV_NATIVE_ENTRY, 5, 1000, 0);
    sample(e, 5, 1100, {0x100});          // unnamed leaf inside copy_: the open call names it
    native(e, LOTUS_EV_NATIVE_RETURN, 5, 1200, 0);
    native(e, LOTUS_EV_NATIVE_ENTRY, 5, 1300, 1);
    sample(e, 5, 1400, {0x200, 0x300});   // named leaf
    native(e, LOTUS_EV_NATIVE_RETURN, 5, 1500, 1);
    sample(e, 5, 1600, {0x300, 0x310});   // unnamed leaf, no open call: nearest named caller
    sample(e, 5, 1700, {0x300});          // nothing: [unknown] in its library
    native(e, LOTUS_EV_NATIVE_RETURN, 5, 1800, 1); // a return without entry: counted, no span
    e.finish();
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_EQ(spans[0].kind, SpanKind::Native);
    EXPECT_EQ(spans[0].name, "at::_ops::copy_::call");
    EXPECT_EQ(spans[0].start_ns, 1000u);
    EXPECT_EQ(spans[0].end_ns, 1200u);
    EXPECT_EQ(spans[1].name, "ImagingResample");
    EXPECT_EQ(e.counters().native_unmatched, 1u);
    EXPECT_EQ(e.counters().samples, 4u);
    auto t = e.native_map().table();
    ASSERT_EQ(t.size(), 1u); // no op spans here: all outside
    EXPECT_EQ(t[0].samples, 4u);
    EXPECT_EQ(t[0].named, 3u);
    std::map<std::string, std::string> fns;
    for (const auto& f : t[0].functions)
        fns[f.function] = f.library;
    EXPECT_EQ(fns["at::_ops::copy_::call"], "libtorch_cpu.so");
    EXPECT_EQ(fns["ImagingResampleHorizontal_8bpc"], "_imaging.so");
    EXPECT_EQ(fns["PyObject_Call"], "python3.11");
    EXPECT_EQ(fns["[unknown]"], "python3.11");
}

// A hidden kernel's sample with no probed call open: named after the innermost op entry among its callers
// (Framework::sample_anchors), not the nearest named caller (the TensorIterator loop every kernel shares).
TEST(EngineNative, AHiddenLeafIsNamedAfterTheInnermostAnchorAmongItsCallers)
{
    model::Rules rules;
    model::Engine e(rules, [](const Span&) {});
    symbol(e, 1, 0x100, "", "libtorch_cpu.so");
    symbol(e, 1, 0x200, "at::TensorIteratorBase::for_each", "libtorch_cpu.so");
    symbol(e, 1, 0x300, "at::_ops::copy_::call", "libtorch_cpu.so");
    symbol(e, 1, 0x400, "at::_ops::_to_copy::call", "libtorch_cpu.so");
    sample(e, 5, 100, {0x100, 0x200, 0x300, 0x400});
    sample(e, 5, 110, {0x100, 0x200}); // no anchor: the nearest named caller
    e.finish();
    auto t = e.native_map().table();
    ASSERT_EQ(t.size(), 1u);
    std::map<std::string, uint64_t> fns;
    for (const auto& f : t[0].functions)
        fns[f.function] = f.samples;
    EXPECT_EQ(fns["at::_ops::copy_::call"], 1u);
    EXPECT_EQ(fns["at::TensorIteratorBase::for_each"], 1u);
    EXPECT_EQ(fns.count("at::_ops::_to_copy::call"), 0u);
    EXPECT_EQ(t[0].named, 2u);
}

namespace {

void symbol_range(model::Engine& e, uint32_t tgid, uint64_t lo, uint64_t hi, const char* name, const char* lib)
{
    model::RecordSymbolRange r{};
    r.type = model::kRecordSymbolRange;
    r.tgid = tgid;
    r.ip_lo = lo;
    r.ip_hi = hi;
    strncpy(r.name, name, sizeof(r.name) - 1);
    strncpy(r.library, lib, sizeof(r.library) - 1);
    e.consume(&r, sizeof(r));
}

} // namespace

// A range record names every sampled address in it, and none outside; a later range over it replaces it.
TEST(EngineNative, SymbolRangesNameTheAddressesInThem)
{
    model::Rules rules;
    model::Engine e(rules, [](const Span&) {});
    symbol_range(e, 1, 0x1000, 0x1100, "f", "a.so");
    symbol_range(e, 1, 0x1100, 0x1200, "", "a.so"); // a gap between symbols
    symbol_range(e, 2, 0x1000, 0x1100, "g", "b.so"); // another process
    sample(e, 5, 100, {0x1000});
    sample(e, 5, 110, {0x10ff});
    sample(e, 5, 120, {0x1100}); // in the gap: [unknown] in a.so
    sample(e, 5, 130, {0x1200}); // in no range
    symbol_range(e, 1, 0x1080, 0x1180, "h", "c.so"); // over both: they go
    sample(e, 5, 140, {0x1000});
    sample(e, 5, 150, {0x1090});
    e.finish();
    auto t = e.native_map().table();
    ASSERT_EQ(t.size(), 1u);
    std::map<std::pair<std::string, std::string>, uint64_t> n;
    for (const auto& f : t[0].functions)
        n[{f.function, f.library}] = f.samples;
    EXPECT_EQ(n[std::make_pair(std::string("f"), std::string("a.so"))], 2u);
    EXPECT_EQ(n[std::make_pair(std::string("[unknown]"), std::string("a.so"))], 1u);
    EXPECT_EQ(n[std::make_pair(std::string("[unknown]"), std::string("[anonymous]"))], 2u); // 0x1200, and 0x1000 after
    EXPECT_EQ(n[std::make_pair(std::string("h"), std::string("c.so"))], 1u);
    EXPECT_EQ(t[0].named, 3u);
}

TEST(EngineNative, LibrariesProbedLateAndWhenTheProcessBeganItsSpans)
{
    model::Rules rules;
    model::Engine e(rules, [](const Span&) {});
    model::RecordNativeLate late{};
    late.type = model::kRecordNativeLate;
    late.tgid = 7;
    late.ts_ns = 5000;
    late.loaded_ns = 4000;
    strcpy(late.library, "libgdbm.so.6");
    e.consume(&late, sizeof(late));
    e.consume(&late, offsetof(model::RecordNativeLate, library)); // cut short: malformed, not read
    native_func(e, 0, "gdbm_strerror", "libgdbm.so.6");
    native(e, LOTUS_EV_NATIVE_ENTRY, 7, 6000, 0);
    native(e, LOTUS_EV_NATIVE_RETURN, 7, 6100, 0);
    e.finish();
    ASSERT_EQ(e.native_late().size(), 1u);
    EXPECT_EQ(e.native_late()[0].pid, 7u);
    EXPECT_EQ(e.native_late()[0].library, "libgdbm.so.6");
    EXPECT_EQ(e.native_late()[0].loaded_ns, 4000u);
    EXPECT_EQ(e.native_late()[0].live_ns, 5000u);
    EXPECT_EQ(e.counters().malformed, 1u);
    // a native span is not the process's work: no first span
    auto p = e.processes().find(1);
    EXPECT_TRUE(p == e.processes().end() || p->second.first_span_ns == 0);
}

TEST(EngineNative, PerfCounterDeltasReachTheOpSpans)
{
    model::Rules rules;
    std::vector<Span> spans;
    model::Engine e(rules, [&](const Span& s) { spans.push_back(s); });
    test::EventBuilder ev{e};
    ev.code(1, 0x10, "Compose.__call__", "/x/torchvision/transforms/transforms.py");
    ev.code(1, 0x20, "ToTensor.__call__");
    ev.type(1, 0x30, "Compose");
    ev.entry(1, 1, 100, 0, 0x10, 0x30);
    lotus_py_entry in{};
    in.h = {LOTUS_EV_PY_ENTRY, 1, 1, 0, 110};
    in.code = 0x20;
    in.depth = 1;
    in.chain_len = 1;
    in.chain_code[0] = 0x10;
    in.counters.perf[0] = 1000;
    in.counters.perf[2] = 5;
    e.consume(&in, sizeof(in));
    lotus_py_return out{};
    out.h = {LOTUS_EV_PY_RETURN, 1, 1, 0, 150};
    out.depth = 1;
    out.counters.perf[0] = 4000;
    out.counters.perf[2] = 9;
    e.consume(&out, sizeof(out));
    ev.ret(1, 1, 200, 0);
    e.finish();
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_EQ(spans[0].kind, SpanKind::Op);
    EXPECT_EQ(spans[0].counters.perf[0], 3000u);
    EXPECT_EQ(spans[0].counters.perf[1], 0u);
    EXPECT_EQ(spans[0].counters.perf[2], 4u);
}

TEST(NativeSpecs, ParseLibraryAndCxxSymbolGlobs)
{
    auto s = elf::parse_native_spec("libtorch_cpu.so*:at::native::*copy*");
    EXPECT_EQ(s.library, "libtorch_cpu.so*");
    EXPECT_EQ(s.symbol, "at::native::*copy*");
    s = elf::parse_native_spec("libjpeg*:jpeg_read_*");
    EXPECT_EQ(s.library, "libjpeg*");
    EXPECT_EQ(s.symbol, "jpeg_read_*");
    EXPECT_THROW(elf::parse_native_spec("nocolon"), std::invalid_argument);
    EXPECT_THROW(elf::parse_native_spec(":sym"), std::invalid_argument);
    EXPECT_THROW(elf::parse_native_spec("lib:"), std::invalid_argument);
    std::vector<elf::NativeSpec> d;
    for (const auto& row : model::framework::builtin().native_set)
        d.push_back({std::string(row.library), std::string(row.symbol)});
    // the built-in set: where sampling cannot name the code (Pillow's JPEG decode call, libtorch's ops)
    EXPECT_FALSE(elf::library_wanted(d, "/usr/lib/x86_64-linux-gnu/libjpeg.so.62.3.0"));
    EXPECT_TRUE(elf::library_wanted(d, "/x/PIL/_imaging.cpython-311-x86_64-linux-gnu.so"));
    EXPECT_TRUE(elf::library_wanted(d, "/x/torch/lib/libtorch_cpu.so"));
    EXPECT_FALSE(elf::library_wanted(d, "/usr/lib/x86_64-linux-gnu/libc.so.6"));
}

TEST(NativeSpecs, ResolvesFunctionsOfARealLibraryByGlob)
{
    // libc is on every machine: its exported memcpy family, with file offsets a uprobe can use.
    auto fns = elf::resolve_native({{"libc.so*", "memcpy*"}}, "/lib/x86_64-linux-gnu/libc.so.6");
    ASSERT_FALSE(fns.empty());
    for (const auto& f : fns) {
        EXPECT_EQ(f.name.rfind("memcpy", 0), 0u) << f.name;
        EXPECT_GT(f.offset, 0u);
        EXPECT_EQ(f.library, "libc.so.6");
    }
    EXPECT_TRUE(elf::resolve_native({{"libc.so*", "no_such_function_xyz"}}, "/lib/x86_64-linux-gnu/libc.so.6").empty());
    EXPECT_TRUE(elf::resolve_native({{"libjpeg*", "*"}}, "/lib/x86_64-linux-gnu/libc.so.6").empty());
}

TEST(Symbols, DemangleDropsParametersButKeepsAnonymousNamespaces)
{
    EXPECT_EQ(elf::demangle("_ZN2at4_ops5copy_4callERNS_6TensorERKS2_b"), "at::_ops::copy_::call");
    EXPECT_EQ(elf::demangle("_ZN2at4_ops5copy_4callERNS_6TensorERKS2_b", true),
              "at::_ops::copy_::call(at::Tensor&, at::Tensor const&, bool)");
    EXPECT_EQ(elf::demangle("_ZN12_GLOBAL__N_13fooEv"), "(anonymous namespace)::foo");
    EXPECT_EQ(elf::demangle("ImagingResample"), "ImagingResample");
    EXPECT_EQ(elf::demangle("_Znot_valid"), "_Znot_valid");
}

TEST(Symbols, FunctionTableFindsAFunctionByFileOffset)
{
    elf::FunctionTable t("/lib/x86_64-linux-gnu/libc.so.6");
    auto fns = elf::resolve_native({{"libc.so*", "getpid"}}, "/lib/x86_64-linux-gnu/libc.so.6");
    ASSERT_EQ(fns.size(), 1u);
    const std::string* name = t.find_offset(fns[0].offset + 1);
    ASSERT_NE(name, nullptr);
    EXPECT_TRUE(*name == "getpid" || *name == "__getpid") << *name;
}

// Every offset of the range find_offset_range gives for an offset is named as that offset is (the same
// function, or none): checked at the range's ends and through it, at offsets spread over real files.
TEST(Symbols, AnOffsetsRangeResolvesAsTheOffsetDoes)
{
    for (const char* path : {"/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3.11"}) {
        elf::FunctionTable t(path);
        struct stat st;
        ASSERT_EQ(stat(path, &st), 0);
        uint64_t size = static_cast<uint64_t>(st.st_size), named = 0, widths = 0, checked = 0;
        for (uint64_t off = 4096; off < size; off += 997) {
            uint64_t lo, hi;
            const std::string* name = t.find_offset_range(off, &lo, &hi);
            ASSERT_EQ(name, t.find_offset(off)) << path << " +" << off;
            ASSERT_LE(lo, off);
            ASSERT_LT(off, hi);
            named += name != nullptr;
            widths += hi - lo;
            checked++;
            for (uint64_t o : {lo, hi - 1, lo + (hi - lo) / 2, lo + (hi - lo) / 3})
                ASSERT_EQ(t.find_offset(o), name) << path << " +" << o << " in [" << lo << ", " << hi << ")";
        }
        EXPECT_GT(named, 100u) << path; // (a stripped interpreter names its exported functions only)
        EXPECT_GT(widths / checked, 64u) << path; // ranges are functions and gaps, not single addresses
    }
}

// The symbolizer's range for an address of this process: the function around it, as process addresses.
TEST(Symbols, AnAddressRangeIsTheFunctionAroundIt)
{
    proc::ProcessTree tree;
    elf::Symbolizer s(tree);
    auto pid = static_cast<uint32_t>(getpid());
    auto own = reinterpret_cast<uint64_t>(&getpid);
    auto f = s.resolve(pid, own + 1);
    ASSERT_TRUE(f.function == "getpid" || f.function == "__getpid") << f.function;
    EXPECT_LE(f.lo, own);
    EXPECT_GT(f.hi, own + 1);
    EXPECT_LT(f.hi - f.lo, 4096u);
    for (uint64_t a : {f.lo, f.hi - 1}) {
        auto g = s.resolve(pid, a);
        EXPECT_EQ(g.function, f.function);
        EXPECT_EQ(g.library, f.library);
        EXPECT_EQ(g.lo, f.lo);
        EXPECT_EQ(g.hi, f.hi);
    }
    // Addresses spread over libc's code as this process maps it: each range's ends and middle resolve as the
    // address did, and ranges are disjoint where they differ.
    std::ifstream maps("/proc/self/maps");
    std::string line;
    uint64_t start = 0, end = 0;
    while (std::getline(maps, line))
        if (line.find("r-xp") != std::string::npos && line.find("/libc.so.6") != std::string::npos) {
            start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
            end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
        }
    ASSERT_LT(start, end);
    uint64_t named = 0;
    for (uint64_t a = start; a < end; a += 1009) {
        auto r = s.resolve(pid, a);
        ASSERT_LE(r.lo, a);
        ASSERT_LT(a, r.hi);
        ASSERT_GE(r.lo, start);
        ASSERT_LE(r.hi, end);
        named += !r.function.empty();
        for (uint64_t b : {r.lo, r.hi - 1, r.lo + (r.hi - r.lo) / 2}) {
            auto g = s.resolve(pid, b);
            ASSERT_EQ(g.function, r.function) << std::hex << a << " " << b;
            ASSERT_EQ(g.library, r.library);
        }
    }
    EXPECT_GT(named, 100u);
}

namespace {

// Maps a copy of `from` at `path` (written beside it, then renamed over whatever was there) into this process.
uint64_t map_copy(const char* from, const std::string& path)
{
    std::ifstream in(from, std::ios::binary);
    std::string tmp = path + ".new";
    std::ofstream(tmp, std::ios::binary) << in.rdbuf();
    if (rename(tmp.c_str(), path.c_str()) != 0)
        return 0;
    int fd = open(path.c_str(), O_RDONLY);
    struct stat st;
    void* at = fd >= 0 && fstat(fd, &st) == 0
                   ? mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0)
                   : MAP_FAILED;
    close(fd);
    return at == MAP_FAILED ? 0 : reinterpret_cast<uint64_t>(at);
}

uint64_t file_offset_of(const char* file, const char* symbol)
{
    elf::ElfFile f(file);
    auto sym = f.symbol(symbol);
    return sym ? f.file_offset(sym->value).value_or(0) : 0;
}

} // namespace

// A library replaced at its path (an upgrade while the job runs) is two files: each mapping is named from the
// file it maps, the old one (deleted now) and the new one, never one from the other's symbols.
TEST(Symbols, AFileReplacedAtItsPathIsNamedFromWhatEachMappingMaps)
{
    const char* libc = "/lib/x86_64-linux-gnu/libc.so.6";
    const char* libz = "/lib/x86_64-linux-gnu/libz.so.1";
    char dir[] = "/tmp/lotus-replaced-XXXXXX";
    ASSERT_TRUE(mkdtemp(dir));
    std::string path = std::string(dir) + "/libshared.so";
    uint64_t getpid_at = file_offset_of(libc, "getpid"), version_at = file_offset_of(libz, "zlibVersion");
    ASSERT_TRUE(getpid_at && version_at);
    auto pid = static_cast<uint32_t>(getpid());
    proc::ProcessTree tree;
    elf::Symbolizer s(tree);
    uint64_t old_map = map_copy(libc, path);
    ASSERT_NE(old_map, 0u);
    auto before = s.resolve(pid, old_map + getpid_at);
    EXPECT_TRUE(before.function == "getpid" || before.function == "__getpid") << before.function;
    uint64_t new_map = map_copy(libz, path); // the same path names libz's copy now
    ASSERT_NE(new_map, 0u);
    s.library_opened(pid);
    usleep(110'000); // past the maps' shortest re-read interval
    EXPECT_EQ(s.resolve(pid, new_map + version_at).function, "zlibVersion");
    auto old_again = s.resolve(pid, old_map + getpid_at);
    EXPECT_TRUE(old_again.function == "getpid" || old_again.function == "__getpid") << old_again.function;
    auto place = s.place(pid, new_map + version_at);
    ASSERT_TRUE(place);
    EXPECT_EQ(place->file_offset, version_at);
    munmap(reinterpret_cast<void*>(old_map), 1);
    unlink(path.c_str());
    rmdir(dir);
}

// A fork child is symbolised with its parent's maps (not read again: a DataLoader worker each epoch), and what
// it maps after the fork, missing from them, makes it read its own.
TEST(Symbols, AForkChildUsesItsParentsMapsUntilItMissesThem)
{
    const char* libc = "/lib/x86_64-linux-gnu/libc.so.6";
    auto fns = elf::resolve_native({{"libc.so*", "getpid"}}, libc);
    ASSERT_EQ(fns.size(), 1u);
    auto is_getpid = [](const elf::NativeFrame& f) {
        return (f.function == "getpid" || f.function == "__getpid") && f.library == "libc.so.6";
    };
    proc::ProcessTree tree;
    elf::Symbolizer s(tree);
    auto own = reinterpret_cast<uint64_t>(&getpid);
    EXPECT_TRUE(is_getpid(s.resolve(static_cast<uint32_t>(getpid()), own)));
    EXPECT_EQ(s.maps_read(), 1u);

    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) { // a second mapping of libc, made after the fork
        int fd = open(libc, O_RDONLY);
        struct stat st;
        void* at = fd >= 0 && fstat(fd, &st) == 0
                       ? mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0)
                       : MAP_FAILED;
        uint64_t addr = at == MAP_FAILED ? 0 : reinterpret_cast<uint64_t>(at);
        if (write(ready[1], &addr, sizeof(addr)) != sizeof(addr))
            _exit(1);
        pause();
        _exit(0);
    }
    uint64_t mapped = 0;
    ASSERT_EQ(read(ready[0], &mapped, sizeof(mapped)), static_cast<ssize_t>(sizeof(mapped)));
    close(ready[0]);
    close(ready[1]);
    tree.add(static_cast<uint32_t>(child), static_cast<uint32_t>(getpid()));
    s.forked(static_cast<uint32_t>(child), static_cast<uint32_t>(getpid()));
    EXPECT_TRUE(is_getpid(s.resolve(static_cast<uint32_t>(child), own)));
    EXPECT_EQ(s.maps_read(), 1u); // the parent's
    ASSERT_NE(mapped, 0u);
    EXPECT_TRUE(is_getpid(s.resolve(static_cast<uint32_t>(child), mapped + fns[0].offset)));
    // Its own, on the miss: that address alone where the kernel answers one (6.11+), else the whole maps.
    bool asked = s.maps_queried() > 0;
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 && (major > 6 || (major == 6 && minor >= 11))) {
        EXPECT_TRUE(asked) << u.release;
    }
    EXPECT_EQ(s.maps_read(), asked ? 1u : 2u);
    if (asked) { // kept: asked once
        EXPECT_TRUE(is_getpid(s.resolve(static_cast<uint32_t>(child), mapped + fns[0].offset)));
        EXPECT_EQ(s.maps_queried(), 1u);
        // An address where nothing is mapped is asked, and reads nothing.
        EXPECT_TRUE(s.resolve(static_cast<uint32_t>(child), 0x1000).function.empty());
        EXPECT_EQ(s.maps_queried(), 2u);
        EXPECT_EQ(s.maps_read(), 1u);
    }
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
}

TEST(Counters, ParseNamesAndRefuseUnknownOnes)
{
    auto c = capture::parse_counters(capture::default_counters());
    ASSERT_EQ(c.size(), 4u);
    EXPECT_EQ(c[0].name, "cycles");
    EXPECT_TRUE(c[0].hardware);
    auto sw = capture::parse_counters("task-clock,page-faults,context-switches");
    ASSERT_EQ(sw.size(), 3u);
    EXPECT_FALSE(sw[0].hardware);
    for (const auto& c : sw) // asked for by name: perf's events
        EXPECT_EQ(c.source, LOTUS_SRC_PERF_EVENT) << c.name;
    // where no PMU counts the asked ones: the thread's own counts, no event
    auto own = capture::thread_counters();
    ASSERT_EQ(own.size(), 3u);
    EXPECT_EQ(own[0].name, "task-clock");
    EXPECT_EQ(own[0].source, LOTUS_SRC_ON_CPU_NS);
    EXPECT_EQ(own[1].name, "faults");
    EXPECT_EQ(own[1].source, LOTUS_SRC_FAULTS);
    EXPECT_EQ(own[2].name, "context-switches");
    EXPECT_EQ(own[2].source, LOTUS_SRC_SWITCHES);
    EXPECT_THROW(capture::parse_counters("cycles,bogus"), std::invalid_argument);
    EXPECT_THROW(capture::parse_counters(""), std::invalid_argument);
    EXPECT_THROW(capture::parse_counters("cycles,instructions,branches,cache-misses,task-clock"), std::invalid_argument);
}

#include "elf/elf_file.h"
#include "cpython/opcode_handlers.h"

TEST(OpcodeHandlers, FoundBySymbolInAnInterpreterWithSymbolsRefusedInAStrippedOne)
{
    const char* lib = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0";
    if (access(lib, R_OK) != 0)
        GTEST_SKIP() << "no pyenv CPython 3.11.7 here";
    elf::ElfFile elf(lib);
    auto h = cpython::find_opcode_handlers(elf, {151, 150, 83});
    ASSERT_TRUE(h.has_value());
    ASSERT_EQ(h->size(), 3u);
    auto eval = elf.symbol("_PyEval_EvalFrameDefault");
    ASSERT_TRUE(eval.has_value());
    auto lo = elf.file_offset(eval->value);
    ASSERT_TRUE(lo.has_value());
    for (uint64_t off : *h) {
        EXPECT_GT(off, *lo); // a label inside the evaluator, not its entry
        EXPECT_LT(off, *lo + eval->size);
    }
    EXPECT_NE((*h)[0], (*h)[2]);
    EXPECT_FALSE(cpython::find_opcode_handlers(elf::ElfFile("/usr/bin/python3.11"), {151, 150, 83}).has_value());
}
