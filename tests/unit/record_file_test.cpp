// The record file's compact blocks: byte-exact round trips of every kind of record, and clear errors (never a
// crash) on damaged blocks.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <random>
#include <unistd.h>
#include <zlib.h>

#include "record/record_codec.h"
#include "record/record_file.h"
#include "lotus_abi.h"

using namespace lotus;
using namespace lotus::common;
using namespace lotus::record;

namespace {

template <typename T> std::vector<uint8_t> bytes_of(const T& v)
{
    std::vector<uint8_t> b(sizeof(v));
    memcpy(b.data(), &v, sizeof(v));
    return b;
}

// A stream like a traced pipeline's: two processes, entries and returns nesting with running counters, code
// and open records that repeat, odd-sized records, a thread that appears once.
std::vector<std::vector<uint8_t>> synthetic_stream(size_t n, uint32_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<std::vector<uint8_t>> out;
    uint64_t ts = 1'000'000'000, cpu_ns = 0;
    for (size_t i = 0; out.size() < n; i++) {
        uint32_t tgid = 100 + uint32_t(i % 2), tid = tgid;
        uint64_t code = 0x7f0000001000ull + 0x100 * (i % 5);
        lotus_py_entry e{};
        e.h = {LOTUS_EV_PY_ENTRY, tgid, tid, uint32_t(rng() % 2), ts += rng() % 50000};
        e.frame = 0x7f0000100000ull + 0x50 * (i % 5);
        e.code = code;
        e.self_obj = 0x7f0000200000ull + 0x40 * (i % 5);
        e.arg1_obj = rng(); // an unpredictable pointer
        e.depth = uint32_t(i % 5);
        e.chain_len = 2;
        e.chain_code[0] = code - 0x100;
        e.chain_arg1[0] = int64_t(i);
        e.chain_arg1[1] = LOTUS_NO_VALUE;
        e.counters.cpu_ns = cpu_ns += rng() % 40000;
        e.counters.min_flt = i / 7;
        e.counters.perf[0] = rng();
        out.push_back(bytes_of(e));
        lotus_py_return r{};
        r.h = {LOTUS_EV_PY_RETURN, tgid, tid, 1, ts += rng() % 50000};
        r.depth = e.depth;
        r.ret_null = i % 11 == 0;
        r.counters = e.counters;
        r.counters.cpu_ns = cpu_ns += rng() % 40000;
        out.push_back(bytes_of(r));
        if (i % 3 == 0) {
            lotus_code_info c{};
            c.h = {LOTUS_EV_CODE, tgid, tid, 0, ts};
            c.code = code;
            snprintf(c.name, sizeof(c.name), "Op%zu.__call__", i % 5);
            snprintf(c.file, sizeof(c.file), "/usr/lib/python3/x.py");
            out.push_back(bytes_of(c)); // repeats every 5th time
        }
        if (i % 17 == 0) {
            std::vector<uint8_t> odd(24 + 13 + i % 8, uint8_t(i)); // a length that is not a multiple of 8
            lotus_event_header h{uint32_t(100 + i % 3), 999, 1000 + uint32_t(i), 0, ts};
            memcpy(odd.data(), &h, sizeof(h));
            out.push_back(odd);
        }
    }
    out.resize(n);
    return out;
}

std::vector<std::vector<uint8_t>> round_trip(const std::vector<std::vector<uint8_t>>& recs, Streams* streams = nullptr,
                                             uint32_t format = record::kBlockFormat)
{
    record::BlockEncoder enc(format);
    for (const auto& r : recs)
        enc.add(r.data(), r.size());
    std::string block = enc.finish(6);
    // Reread the block's streams as the reader does (sizes, then deflated payloads).
    uint32_t head[2];
    memcpy(head, block.data(), 8);
    EXPECT_EQ(head[0], recs.size());
    EXPECT_EQ(head[1], record::kStreamCount);
    record::Streams s;
    size_t at = 8 + record::kStreamCount * 8;
    for (size_t i = 0; i < record::kStreamCount; i++) {
        uint32_t raw, packed;
        memcpy(&raw, block.data() + 8 + i * 8, 4);
        memcpy(&packed, block.data() + 12 + i * 8, 4);
        s[i].resize(raw);
        uLongf n = raw;
        EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(s[i].data()), &n,
                             reinterpret_cast<const Bytef*>(block.data() + at), packed), Z_OK);
        at += packed;
    }
    EXPECT_EQ(at, block.size());
    if (streams)
        *streams = s;
    auto decoded = record::decode_streams(s, head[0], format);
    std::vector<std::vector<uint8_t>> out;
    for (size_t i = 0; i < decoded.size(); i++)
        out.push_back(decoded.record(i));
    return out;
}

std::string temp_path()
{
    char p[] = "/tmp/lotus-record-test-XXXXXX";
    int fd = mkstemp(p);
    close(fd);
    return p;
}

// The bytes of an empty record file with this header's metadata, as the writer makes it.
std::string empty_file(const std::string& meta)
{
    std::string path = temp_path();
    {
        record::RecordWriter w(path, RecordHeader{123, 42, meta});
        w.close();
    }
    FILE* f = fopen(path.c_str(), "rb");
    std::string all;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;)
        all.append(buf, n);
    fclose(f);
    unlink(path.c_str());
    return all;
}

} // namespace

TEST(RecordCodec, RoundTripsEveryKindOfRecordByteForByte)
{
    auto recs = synthetic_stream(5000, 1);
    for (uint32_t format : {2u, record::kBlockFormat}) // files of format 2 are still read
        EXPECT_EQ(round_trip(recs, nullptr, format), recs) << format;
}

TEST(RecordCodec, EntriesArePredictedFromThoseWithTheSameSelf)
{
    // Module._call_impl runs every nn.Module op of a pipeline: its entries cycle through the ops' selves.
    std::mt19937_64 rng(7);
    std::vector<std::vector<uint8_t>> recs;
    uint64_t ts = 1'000'000'000;
    for (size_t i = 0; i < 6000; i++) {
        lotus_py_entry e{};
        e.h = {LOTUS_EV_PY_ENTRY, 100, 100, 0, ts += 1000 + rng() % 64};
        e.code = 0x7f0000001000ull;
        size_t op = i % 3 == 2 && rng() % 2 ? 0 : i % 3; // not strictly periodic
        e.self_obj = 0x7f0000200000ull + 0x1230 * op;
        e.self_type = 0x7f0000300000ull + 0x4560 * op;
        e.frame = 0x7f0000100000ull + 0x50 * op;
        e.chain_len = 2;
        e.chain_code[0] = 0x7f0000002000ull;
        e.chain_arg1[0] = int64_t(rng() % 100000); // a sample index
        recs.push_back(bytes_of(e));
    }
    record::Streams s2, s3;
    EXPECT_EQ(round_trip(recs, &s2, 2), recs);
    EXPECT_EQ(round_trip(recs, &s3, 3), recs);
    auto deflated = [](const std::string& x) {
        uLongf n = compressBound(uLong(x.size()));
        std::string out(n, '\0');
        compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(x.data()), uLong(x.size()), 6);
        return size_t(n);
    };
    size_t v2 = deflated(s2[record::kStreamEntry]) + deflated(s2[record::kStreamKey]);
    size_t v3 = deflated(s3[record::kStreamEntry]) + deflated(s3[record::kStreamKey]);
    // Format 2 codes self, self type and frame as differences between ops, format 3 one index; the random
    // sample index costs both the same (~3 bytes per entry).
    EXPECT_GT(v2, v3 + recs.size() / 4) << v3 << " vs " << v2;
}

TEST(RecordCodec, PredictableFieldsCostAlmostNothing)
{
    auto recs = synthetic_stream(20000, 2);
    size_t raw = 0;
    for (const auto& r : recs)
        raw += r.size();
    record::BlockEncoder enc;
    for (const auto& r : recs)
        enc.add(r.data(), r.size());
    size_t packed = enc.finish(6).size();
    // entries are 280 bytes, returns 104: what remains is timestamps, counters and the random pointers
    EXPECT_LT(packed * 10, raw) << packed << " of " << raw;
}

TEST(RecordCodec, DamagedStreamsAreRefusedWithAReason)
{
    auto recs = synthetic_stream(300, 3);
    record::Streams s;
    round_trip(recs, &s);
    EXPECT_THROW(record::decode_streams(s, uint32_t(recs.size()), 4), CodecError); // a format it does not know
    EXPECT_THROW(record::decode_streams(s, uint32_t(recs.size() + 1)), CodecError); // a record more than the streams hold
    EXPECT_THROW(record::decode_streams(s, uint32_t(recs.size() - 1)), CodecError); // streams hold more than the records
    std::mt19937 rng(4);
    for (int trial = 0; trial < 2000; trial++) {
        record::Streams bad = s;
        auto& victim = bad[rng() % record::kStreamCount];
        if (victim.empty())
            continue;
        victim[rng() % victim.size()] ^= char(1 + rng() % 255);
        try {
            auto out = record::decode_streams(bad, uint32_t(recs.size()));
            EXPECT_EQ(out.size(), recs.size()); // a damaged value may still decode: only never a crash
        } catch (const CodecError&) {
        }
    }
}

TEST(RecordFile, WritesBlocksAndReadsThemBack)
{
    auto recs = synthetic_stream(40000, 5); // more than one block
    std::string path = temp_path();
    {
        record::RecordWriter w(path, RecordHeader{123, 42, R"({"python":"3.11.2"})"});
        for (const auto& r : recs)
            w.write(r.data(), r.size());
        w.close();
    }
    struct stat st{};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u); // the job's command lines and file paths: its owner's only
    record::RecordReader in(path);
    EXPECT_EQ(in.header().t0_ns, 123u);
    EXPECT_EQ(in.header().root_pid, 42u);
    EXPECT_EQ(in.header().meta_json, R"({"python":"3.11.2"})");
    std::vector<std::vector<uint8_t>> back;
    for (std::vector<uint8_t> r; in.next(r);)
        back.push_back(r);
    EXPECT_EQ(back, recs);
    // cut anywhere inside the records: a clear error, never a crash or a silent short read
    FILE* f = fopen(path.c_str(), "rb");
    std::string all;
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;)
        all.append(buf, n);
    fclose(f);
    for (size_t cut : {all.size() - 1, all.size() / 2, size_t(60)}) {
        FILE* m = fmemopen(all.data(), cut, "rb");
        record::RecordReader r(m, "cut");
        std::vector<uint8_t> rec;
        EXPECT_THROW({ while (r.next(rec)) {} }, RecordError) << cut;
    }
    unlink(path.c_str());
}

TEST(RecordFile, ReadsTheEventAbisItKnows)
{
    std::string all = empty_file("{}");
    // Files of an earlier event ABI (their DataLoader records differ) and of unknown ones are refused.
    for (uint32_t abi : {2u, 3u, uint32_t(LOTUS_ABI_VERSION), 1u, uint32_t(LOTUS_ABI_VERSION + 1)}) {
        memcpy(all.data() + 12, &abi, 4);
        FILE* m = fmemopen(all.data(), all.size(), "rb");
        bool known = abi == LOTUS_ABI_VERSION;
        if (known) {
            record::RecordReader r(m, "abi");
            std::vector<uint8_t> rec;
            EXPECT_FALSE(r.next(rec)) << abi;
        } else {
            EXPECT_THROW(record::RecordReader(m, "abi"), RecordError) << abi;
        }
    }
}

TEST(RecordFile, DamagedHeaderOrMetadataIsRefusedWithOneLine)
{
    const std::string meta = R"({"python":"3.11.2","interpreter":"/usr/bin/python3.11"})";
    std::string all = empty_file(meta);
    // Every byte after the magic, version and ABI: t0, root pid, metadata length, metadata, checksum.
    for (size_t at = 16; at < 32 + meta.size() + 4; at++) {
        std::string bad = all;
        bad[at] ^= 0x20;
        FILE* m = fmemopen(bad.data(), bad.size(), "rb");
        try {
            record::RecordReader r(m, "damaged");
            ADD_FAILURE() << "damage at byte " << at << " accepted";
        } catch (const RecordError& e) {
            std::string msg = e.what();
            EXPECT_EQ(msg.find('\n'), std::string::npos);
            if (at < 28 || at >= 32) { // a damaged length reads as truncation or a wrong checksum
                EXPECT_NE(msg.find("damaged"), std::string::npos) << at << ": " << msg;
            }
        }
    }
}

// At the disk reserve the record file stops after its last whole block: it reads back to there, without error.
TEST(RecordFile, CutAtTheDiskReserveEndsAfterAWholeBlock)
{
    auto recs = synthetic_stream(200000, 7);
    std::string path = temp_path();
    auto small_fs = [](int fd, FsSpace& s) { // 10 MiB, 5 % reserved, 1 MB free above it
        struct stat st{};
        fstat(fd, &st);
        s = {(10 << 20) / 20 + 4096 + 1'000'000 - static_cast<uint64_t>(st.st_size), 10 << 20};
        return true;
    };
    OutputCuts cuts;
    {
        record::RecordWriter w(path, {}, kDefaultDiskReserve, &cuts, small_fs);
        w.begin(RecordHeader{123, 42, R"({"python":"3.11.2"})"});
        for (const auto& r : recs)
            w.write(r.data(), r.size());
        EXPECT_TRUE(w.close());
    }
    ASSERT_EQ(cuts.list().size(), 1u); // told to its run's list
    EXPECT_EQ(cuts.list()[0].what, "--record");
    struct stat st{};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_LE(st.st_size, 1'000'000);
    record::RecordReader in(path);
    EXPECT_EQ(in.header().root_pid, 42u);
    size_t n = 0;
    for (std::vector<uint8_t> r; in.next(r); n++)
        ASSERT_EQ(r, recs[n]);
    EXPECT_GT(n, 0u);
    EXPECT_LT(n, recs.size());
    unlink(path.c_str());
}
