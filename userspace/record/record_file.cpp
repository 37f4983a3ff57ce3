#include "record/record_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <zlib.h>

#include "lotus_abi.h"

namespace lotus::record {

namespace {

constexpr char kMagic[8] = {'L', 'O', 'T', 'U', 'S', 'L', 'B', 'T'};
// 1: records as captured, each after its u32 length. 2, 3: blocks of compactly encoded records (record_codec.h).
// 4: format 3's blocks after a header that ends in a CRC-32 of itself and the metadata.
constexpr uint32_t kFormatVersion = 4;
constexpr uint32_t kFirstCrcFormat = 4;
static_assert(kBlockFormat == 3, "format 4 files hold format 3 blocks");
constexpr uint32_t kOldBlockFormat = 2; // still read
constexpr uint32_t kLegacyVersion = 1;
// ABI 4 changed what DataLoader semantics are made of (queue messages, DataLoader.__iter__'s return value,
// base classes of types): earlier files would replay without batches, so they are refused with a reason.
constexpr uint32_t kOldestAbi = 4;
constexpr uint32_t kMaxRecord = 1 << 16;
constexpr uint32_t kMaxMeta = 1 << 20;
// The writer cuts a block at this many records or bytes: bounded memory, and little lost if the tracer dies.
constexpr size_t kBlockRecords = 16384;
constexpr size_t kBlockBytes = 4 << 20;
constexpr int kDeflateLevel = 6;

} // namespace

RecordWriter::RecordWriter(const std::string& path, const RecordHeader& h, common::OutputFailure on_failure,
                           double reserve_pct)
    : RecordWriter(path, std::move(on_failure), reserve_pct)
{
    begin(h);
}

RecordWriter::RecordWriter(const std::string& path, common::OutputFailure on_failure, double reserve_pct,
                           common::OutputCuts* cuts, common::FsSpaceProbe space)
    // 0600: its command lines and paths are the user's only.
    : out_(path, common::OutputOptions{false, "--record", 0600, reserve_pct, cuts, std::move(space)}, std::move(on_failure))
{
    out_.allow_cut(0); // at the disk reserve, the file ends after its last whole block: it replays up to there
}

void RecordWriter::begin(const RecordHeader& h)
{
    uint32_t version = kFormatVersion, abi = LOTUS_ABI_VERSION, meta = static_cast<uint32_t>(h.meta_json.size());
    std::string head(kMagic, 8);
    auto put = [&](const void* p, size_t n) { head.append(static_cast<const char*>(p), n); };
    put(&version, 4);
    put(&abi, 4);
    put(&h.t0_ns, 8);
    put(&h.root_pid, 4);
    put(&meta, 4);
    head += h.meta_json;
    // Format 4: damage to the header or the metadata is caught like damage to a block.
    uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(head.data()), head.size()));
    put(&crc, 4);
    out_.write(head);
    out_.flush(); // in the file at once, so that a cut file still has it
    if (out_.cut())
        out_.write_tail(head);
}

void RecordWriter::write(const void* data, size_t len)
{
    if (out_.failed() || out_.cut() || len == 0 || len > kMaxRecord)
        return;
    block_.add(static_cast<const uint8_t*>(data), len);
    if (block_.records() >= kBlockRecords || block_.raw_bytes() >= kBlockBytes)
        flush();
}

void RecordWriter::flush()
{
    if (out_.failed() || out_.cut() || block_.records() == 0)
        return;
    out_.write(block_.finish(kDeflateLevel));
}

bool RecordWriter::close()
{
    flush();
    return out_.commit();
}

RecordReader::RecordReader(const std::string& path) : path_(path)
{
    f_ = fopen(path.c_str(), "rb");
    if (!f_)
        throw RecordError(fmt::format("cannot read {}: {}", path, strerror(errno)));
    read_header_or_close();
}

RecordReader::RecordReader(FILE* f, const std::string& name) : path_(name), f_(f)
{
    if (!f_)
        throw RecordError(fmt::format("cannot read {}", name));
    read_header_or_close();
}

// A constructor that throws runs no destructor: the stream is closed here (glibc keeps every open FILE on a
// list, so a leaked one is not even reported as a leak).
void RecordReader::read_header_or_close()
{
    try {
        read_header();
    } catch (...) {
        fclose(f_);
        f_ = nullptr;
        throw;
    }
}

void RecordReader::read_header()
{
    const std::string& path = path_;
    char magic[8];
    uint32_t version = 0, abi = 0, meta = 0;
    if (fread(magic, 1, 8, f_) != 8 || memcmp(magic, kMagic, 8) != 0)
        throw RecordError(fmt::format("{} is not a lotus-bpf record file", path));
    if (fread(&version, 4, 1, f_) != 1 || fread(&abi, 4, 1, f_) != 1 || fread(&header_.t0_ns, 8, 1, f_) != 1 ||
        fread(&header_.root_pid, 4, 1, f_) != 1 || fread(&meta, 4, 1, f_) != 1)
        throw RecordError(fmt::format("{}: truncated header", path));
    if (abi < kOldestAbi && abi >= 2)
        throw RecordError(fmt::format("{}: recorded by an earlier lotus-bpf (event ABI {}), whose records of DataLoader "
                                      "activity this version does not reconstruct: record it again",
                                      path, abi));
    if ((version != kFormatVersion && version != kBlockFormat && version != kOldBlockFormat &&
         version != kLegacyVersion) ||
        abi < kOldestAbi ||
        abi > LOTUS_ABI_VERSION)
        throw RecordError(fmt::format("{}: record format {} / event ABI {} (this lotus-bpf reads {}-{} / {}-{})", path,
                                      version, abi, kLegacyVersion, kFormatVersion, kOldestAbi, LOTUS_ABI_VERSION));
    if (meta > kMaxMeta)
        throw RecordError(fmt::format("{}: corrupt header (metadata of {} bytes)", path, meta));
    header_.meta_json.resize(meta);
    if (meta && fread(header_.meta_json.data(), 1, meta, f_) != meta)
        throw RecordError(fmt::format("{}: truncated header", path));
    offset_ = 32 + meta;
    if (version >= kFirstCrcFormat) {
        uint32_t stored = 0;
        if (fread(&stored, 4, 1, f_) != 1)
            throw RecordError(fmt::format("{}: truncated header", path));
        std::string head(magic, 8);
        for (const void* p : {static_cast<const void*>(&version), static_cast<const void*>(&abi)})
            head.append(static_cast<const char*>(p), 4);
        head.append(reinterpret_cast<const char*>(&header_.t0_ns), 8);
        head.append(reinterpret_cast<const char*>(&header_.root_pid), 4);
        head.append(reinterpret_cast<const char*>(&meta), 4);
        head += header_.meta_json;
        if (crc32(0, reinterpret_cast<const Bytef*>(head.data()), head.size()) != stored)
            throw RecordError(fmt::format("{}: the header or its metadata is damaged (checksum mismatch); not replayed",
                                          path));
        offset_ += 4;
    }
    legacy_ = version == kLegacyVersion;
    format_ = version >= kFirstCrcFormat ? kBlockFormat : version; // how its blocks are encoded
}

RecordReader::~RecordReader()
{
    stop_prefetch();
    if (f_)
        fclose(f_);
}

bool RecordReader::next(std::vector<uint8_t>& record)
{
    if (legacy_)
        return next_legacy(record);
    while (next_in_block_ >= block_.size()) {
        if (!take_block())
            return false;
    }
    size_t i = next_in_block_++;
    record.assign(block_.begin(i), block_.end(i));
    return true;
}

// Blocks are read and decoded on a thread of their own, one or two ahead of the caller: inflating and decoding
// are a sixth of an export's work, and the engine and the JSON writer keep the calling thread busy.
void RecordReader::start_prefetch()
{
    prefetch_ = std::thread([this] {
        for (;;) {
            Prefetched item;
            try {
                item.more = read_block(item.records);
            } catch (...) {
                item.error = std::current_exception();
                item.more = false;
            }
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] { return stop_ || queue_.size() < 2; });
            if (stop_)
                return;
            bool last = !item.more;
            queue_.push_back(std::move(item));
            cv_.notify_all();
            if (last)
                return;
        }
    });
}

void RecordReader::stop_prefetch()
{
    if (!prefetch_.joinable())
        return;
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    prefetch_.join();
}

bool RecordReader::take_block()
{
    if (done_)
        return false;
    if (!prefetch_.joinable())
        start_prefetch();
    Prefetched item;
    {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        item = std::move(queue_.front());
        queue_.pop_front();
    }
    cv_.notify_all();
    if (item.error) {
        done_ = true;
        std::rethrow_exception(item.error);
    }
    if (!item.more) {
        done_ = true;
        return false;
    }
    block_ = std::move(item.records);
    next_in_block_ = 0;
    return true;
}

bool RecordReader::read_block(DecodedBlock& out)
{
    uint32_t head[2];
    size_t n = fread(head, 1, sizeof(head), f_);
    if (n == 0 && feof(f_))
        return false;
    if (n != sizeof(head))
        throw RecordError(fmt::format("{}: truncated at byte {}", path_, offset_));
    uint32_t records = head[0];
    if (head[1] != kStreamCount || records > kMaxBlockRecords)
        throw RecordError(fmt::format("{}: corrupt block at byte {}", path_, offset_));
    uint32_t sizes[kStreamCount][2];
    if (fread(sizes, 1, sizeof(sizes), f_) != sizeof(sizes))
        throw RecordError(fmt::format("{}: truncated at byte {}", path_, offset_));
    // Deflate expands at most ~1032:1, and a block's streams are smaller than its records: sizes beyond that
    // are damage, refused before anything is allocated for them.
    uint64_t raw_total = 0;
    for (const auto& sz : sizes) {
        raw_total += sz[0];
        if (sz[0] > uint64_t(sz[1]) * 1032 + 64)
            throw RecordError(fmt::format("{}: corrupt block at byte {}", path_, offset_));
    }
    if (raw_total > kMaxBlockBytes)
        throw RecordError(fmt::format("{}: corrupt block at byte {}", path_, offset_));
    Streams streams;
    uint64_t at = offset_ + sizeof(head) + sizeof(sizes);
    for (size_t i = 0; i < kStreamCount; i++) {
        uint32_t raw = sizes[i][0], packed = sizes[i][1];
        std::string in;
        // read in pieces: a damaged size must fail at the end of the file, not allocate what it claims
        for (char buf[65536]; in.size() < packed;) {
            size_t want = std::min<size_t>(sizeof(buf), packed - in.size());
            if (fread(buf, 1, want, f_) != want)
                throw RecordError(fmt::format("{}: truncated at byte {}", path_, at + in.size()));
            in.append(buf, want);
        }
        streams[i].resize(raw);
        uLongf out_len = raw;
        if (uncompress(reinterpret_cast<Bytef*>(streams[i].data()), &out_len,
                       reinterpret_cast<const Bytef*>(in.data()), packed) != Z_OK ||
            out_len != raw)
            throw RecordError(fmt::format("{}: corrupt block at byte {}", path_, offset_));
        at += packed;
    }
    try {
        out = decode_streams(streams, records, format_);
    } catch (const CodecError& e) {
        throw RecordError(fmt::format("{}: corrupt block at byte {} ({})", path_, offset_, e.what()));
    }
    offset_ = at;
    return true;
}

bool RecordReader::next_legacy(std::vector<uint8_t>& record)
{
    uint32_t len = 0;
    size_t n = fread(&len, 1, 4, f_);
    if (n == 0 && feof(f_))
        return false;
    if (n != 4)
        throw RecordError(fmt::format("{}: truncated at byte {}", path_, offset_));
    if (len < sizeof(lotus_event_header) || len > kMaxRecord)
        throw RecordError(fmt::format("{}: corrupt record of {} bytes at byte {}", path_, len, offset_));
    record.resize(len);
    if (fread(record.data(), 1, len, f_) != len)
        throw RecordError(fmt::format("{}: truncated at byte {}", path_, offset_));
    offset_ += 4 + len;
    return true;
}

} // namespace lotus::record
