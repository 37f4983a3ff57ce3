// The compact encoding of record-file blocks (formats 2 and 3, docs/record-format.md): lossless, byte-exact.
// Each record's fields are predicted from what came before in the block (its thread's previous timestamp,
// CPU and counters, the previous entry of the same code object with the same self, the previous return at the
// same depth, an identical earlier record body), the residuals written as varints into separate streams by
// kind of field, and each stream deflated. A block stands alone: its predictors start empty.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace lotus::record {

constexpr uint32_t kBlockFormat = 3; // what BlockEncoder writes; decode_streams also reads format 2

enum Stream : size_t {
    kStreamType,     // record type, then (types that may repeat) 0 or 1 + index of the identical earlier body
    kStreamWho,      // index in a most-recently-used list of (tgid, tid), or 255 then both as varints
    kStreamCpu,      // format 3: 0 when the thread's previous CPU, else CPU + 1
    kStreamTs,       // ts - the thread's previous ts in the block (else the block's previous record's)
    kStreamLen,      // format 3: 0 when the previous record of the type had this length, else length + 1
    kStreamKey,      // the field that picks a record's context (entry: code, return: depth), delta per thread;
                     // format 3 entries: then self_obj, as its index among the last 4 of that code in the
                     // process, or 4 and its difference from the last one
    kStreamCounters, // lotus_counters of entries and returns, delta per thread (on-CPU ns: minus the ts delta)
    kStreamEntry,    // other fields of entries, delta from the previous entry of the same code (and, format 3,
                     // self) in the process
    kStreamReturn,   // of returns, from the previous return of the thread at that depth
    kStreamOther,    // of other records, from the thread's previous record of that type
    kStreamTail,     // bytes past the last whole 8-byte word, as they are
    kStreamCount
};
using Streams = std::array<std::string, kStreamCount>;

// A block holds at most this many records, and records of at most this many bytes in all (the writer cuts
// blocks well before; the reader refuses more).
constexpr uint32_t kMaxBlockRecords = 1 << 16;
constexpr size_t kMaxBlockBytes = 8 << 20;

// Shared by the encoder and the decoder: what the block has seen so far.
struct CodecState {
    std::vector<std::pair<uint32_t, uint32_t>> who;         // (tgid, tid), most recent first
    std::unordered_map<uint32_t, uint64_t> last_ts;         // per tid
    uint64_t block_last_ts = 0;
    std::unordered_map<uint64_t, uint64_t> last_key;        // per (type, tid)
    std::unordered_map<uint32_t, std::vector<uint64_t>> last_counters; // per tid: 9 words + the ts they had
    std::unordered_map<uint32_t, uint32_t> last_cpu;        // per tid (format 3)
    std::unordered_map<uint32_t, uint64_t> last_len;        // per type (format 3)
    struct ContextKey {
        uint32_t type, id;
        uint64_t key;
        bool operator==(const ContextKey&) const = default;
    };
    struct ContextHash {
        size_t operator()(const ContextKey& k) const
        {
            return std::hash<uint64_t>()(k.key * 0x9e3779b97f4a7c15ull ^ (uint64_t(k.type) << 32 | k.id));
        }
    };
    std::unordered_map<ContextKey, std::vector<uint64_t>, ContextHash> context; // previous body words
    std::unordered_map<ContextKey, std::array<uint64_t, 4>, ContextHash> selves; // format 3: per code, MRU first
    std::unordered_map<std::string, uint32_t> body_index;   // encoder: body -> index
    std::vector<std::string> bodies;                        // decoder: index -> body
};

class BlockEncoder {
public:
    explicit BlockEncoder(uint32_t format = kBlockFormat) : format_(format) {} // 2: for tests of old files
    void add(const uint8_t* rec, size_t len); // rec starts with a lotus_event_header; 24 <= len <= 65536
    size_t records() const { return records_; }
    size_t raw_bytes() const { return raw_bytes_; }
    // The block as written to the file (counts, stream sizes, deflated streams); resets the encoder.
    std::string finish(int level);

private:
    Streams s_;
    CodecState st_;
    std::vector<uint64_t> words_; // the record being encoded, as 8-byte words
    size_t records_ = 0, raw_bytes_ = 0;
    uint32_t format_;
};

struct CodecError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A decoded block: its records back to back (one allocation per block, not per record).
struct DecodedBlock {
    std::vector<uint8_t> bytes;
    std::vector<uint32_t> ends; // end offset of each record in bytes
    size_t size() const { return ends.size(); }
    const uint8_t* begin(size_t i) const { return bytes.data() + (i ? ends[i - 1] : 0); }
    const uint8_t* end(size_t i) const { return bytes.data() + ends[i]; }
    std::vector<uint8_t> record(size_t i) const { return {begin(i), end(i)}; }
};

// Decodes n records from a block's inflated streams (of a file of that format); throws CodecError when they
// do not hold exactly that.
DecodedBlock decode_streams(const Streams& s, uint32_t n, uint32_t format = kBlockFormat);

} // namespace lotus::record
