#include "record/record_codec.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <tuple>
#include <zlib.h>

#include "lotus_abi.h"
#include "model/user_records.h"

namespace lotus::record {

namespace {

constexpr size_t kHeader = sizeof(lotus_event_header);
constexpr size_t kCounterWords = sizeof(lotus_counters) / 8;
constexpr size_t kMaxWho = 64;
static_assert(kHeader == 24 && kCounterWords == 9);

// Which body word (after the header) picks a record's context, and where its counters are, by type.
struct Shape {
    int key = -1;      // body word index of the key, or -1
    int counters = -1; // body word index of lotus_counters, or -1
    Stream stream = kStreamOther;
    int self = -1;     // body word index of self_obj (format 3 entries), or -1
};

Shape shape_of(uint32_t type, size_t len, uint32_t format)
{
    if (type == LOTUS_EV_PY_ENTRY && len == sizeof(lotus_py_entry))
        return {int(offsetof(lotus_py_entry, code) - kHeader) / 8,
                int(offsetof(lotus_py_entry, counters) - kHeader) / 8, kStreamEntry,
                format >= 3 ? int(offsetof(lotus_py_entry, self_obj) - kHeader) / 8 : -1};
    if (type == LOTUS_EV_PY_RETURN && len == sizeof(lotus_py_return))
        return {int(offsetof(lotus_py_return, depth) - kHeader) / 8,
                int(offsetof(lotus_py_return, counters) - kHeader) / 8, kStreamReturn};
    return {};
}

// Entries of one code object alternate between a few selves (Module._call_impl runs every nn.Module op):
// format 3 predicts an entry from the previous one with the same self, kept in most-recently-used order.
uint64_t with_self(uint64_t key, uint64_t self) { return key ^ (self * 0x9e3779b97f4a7c15ull); }

void touch_self(std::array<uint64_t, 4>& mru, size_t found, uint64_t self) // found: its index, or 4
{
    for (size_t k = std::min<size_t>(found, 3); k > 0; k--)
        mru[k] = mru[k - 1];
    mru[0] = self;
}

// Entries and returns are predicted field by field; identical bodies recur among the other records (code
// objects described again by each new worker, files opened again every epoch).
bool may_repeat(uint32_t type) { return type != LOTUS_EV_PY_ENTRY && type != LOTUS_EV_PY_RETURN; }

// Format 3 keeps records that are mostly text (paths, names) as they are, in the tail stream: deflate finds
// what they share with earlier ones (a dataset's directory, a module's file) wherever it is, where the
// difference of 8-byte words from the previous record turned a changed file name into large numbers.
bool raw_body(uint32_t type, uint32_t format)
{
    return format >= 3 && (type == LOTUS_EV_OPEN || type == LOTUS_EV_CODE || type == LOTUS_EV_TYPE ||
                           type == model::kRecordNativeFunc || type == model::kRecordSymbol ||
                           type == model::kRecordSymbolRange);
}

uint64_t zigzag(uint64_t delta) { return (delta << 1) ^ (0 - (delta >> 63)); }
uint64_t unzigzag(uint64_t v) { return (v >> 1) ^ (0 - (v & 1)); }

void put(std::string& s, uint64_t v)
{
    while (v >= 0x80) {
        s.push_back(static_cast<char>(v | 0x80));
        v >>= 7;
    }
    s.push_back(static_cast<char>(v));
}

struct Cursor {
    const std::string* s;
    size_t pos = 0;
    uint64_t get()
    {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos >= s->size())
                throw CodecError("a stream ends early");
            uint8_t b = static_cast<uint8_t>((*s)[pos++]);
            v |= uint64_t(b & 0x7f) << shift;
            if (!(b & 0x80))
                return v;
        }
        throw CodecError("a varint is too long");
    }
    uint8_t byte()
    {
        if (pos >= s->size())
            throw CodecError("a stream ends early");
        return static_cast<uint8_t>((*s)[pos++]);
    }
};

uint64_t word(const uint8_t* p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

uint64_t thread_key(uint32_t type, uint32_t tid) { return uint64_t(type) << 32 | tid; }

// The most-recently-used (tgid, tid) list: index of the pair, moved to the front.
int who_index(CodecState& st, uint32_t tgid, uint32_t tid)
{
    auto& w = st.who;
    for (size_t i = 0; i < w.size(); i++)
        if (w[i].first == tgid && w[i].second == tid) {
            std::rotate(w.begin(), w.begin() + static_cast<long>(i), w.begin() + static_cast<long>(i) + 1);
            return static_cast<int>(i);
        }
    if (w.size() < kMaxWho)
        w.emplace_back();
    std::rotate(w.begin(), w.end() - 1, w.end());
    w[0] = {tgid, tid};
    return -1;
}

uint64_t predicted_ts(const CodecState& st, uint32_t tid)
{
    auto it = st.last_ts.find(tid);
    return it != st.last_ts.end() ? it->second : st.block_last_ts;
}

CodecState::ContextKey context_of(uint32_t type, uint32_t tgid, uint32_t tid, size_t len, const Shape& shape,
                                  uint64_t key)
{
    if (shape.key < 0)
        return {type, tid, len};
    // entries of a code object within a process (its workers run the same ops), returns per thread and depth
    return {type, type == LOTUS_EV_PY_ENTRY ? tgid : tid, key};
}

// The previous words of a record's context (zeros the first time), sized for this record.
std::vector<uint64_t>& previous_words(CodecState& st, const lotus_event_header& h, size_t len, const Shape& shape,
                                      uint64_t key, size_t nw)
{
    auto& prev = st.context[context_of(h.type, h.tgid, h.tid, len, shape, key)];
    if (prev.size() != nw)
        prev.assign(nw, 0);
    return prev;
}

// Words coded against the context: all but the key, self and the counters.
bool context_word(const Shape& shape, size_t j)
{
    bool counter = shape.counters >= 0 && j >= size_t(shape.counters) && j < size_t(shape.counters) + kCounterWords;
    return int(j) != shape.key && int(j) != shape.self && !counter;
}

// Format 3's CPU and length: 0 when as predicted, else the value + 1.
template <typename Map, typename K>
uint64_t predicted_code(Map& last, K k, uint64_t v)
{
    auto [it, fresh] = last.try_emplace(k, v);
    bool hit = !fresh && it->second == v;
    it->second = v;
    return hit ? 0 : v + 1;
}

template <typename Map, typename K>
uint64_t predicted_value(Map& last, K k, uint64_t code, const char* what)
{
    auto it = last.find(k);
    if (code == 0 && it == last.end())
        throw CodecError(fmt::format("bad {} reference", what));
    uint64_t v = code == 0 ? it->second : code - 1;
    last[k] = static_cast<typename Map::mapped_type>(v);
    return v;
}

} // namespace

void BlockEncoder::add(const uint8_t* rec, size_t len)
{
    lotus_event_header h;
    memcpy(&h, rec, kHeader);
    records_++;
    raw_bytes_ += len;
    put(s_[kStreamType], h.type);
    int wi = who_index(st_, h.tgid, h.tid);
    if (wi >= 0) {
        s_[kStreamWho].push_back(static_cast<char>(wi));
    } else {
        s_[kStreamWho].push_back(static_cast<char>(0xff));
        put(s_[kStreamWho], h.tgid);
        put(s_[kStreamWho], h.tid);
    }
    put(s_[kStreamCpu], format_ >= 3 ? predicted_code(st_.last_cpu, h.tid, h.cpu) : h.cpu);
    put(s_[kStreamTs], zigzag(h.ts_ns - predicted_ts(st_, h.tid)));
    st_.last_ts[h.tid] = h.ts_ns;
    st_.block_last_ts = h.ts_ns;
    put(s_[kStreamLen], format_ >= 3 ? predicted_code(st_.last_len, h.type, len) : len);
    if (may_repeat(h.type)) {
        std::string body(reinterpret_cast<const char*>(rec) + kHeader, len - kHeader);
        auto [it, fresh] = st_.body_index.try_emplace(std::move(body), static_cast<uint32_t>(st_.body_index.size()));
        put(s_[kStreamType], fresh ? 0 : uint64_t(it->second) + 1);
        if (!fresh)
            return;
    }
    if (raw_body(h.type, format_)) { // without its trailing zeros (the rest of a fixed-size path buffer)
        size_t n = len - kHeader;
        while (n && rec[kHeader + n - 1] == 0)
            n--;
        put(s_[kStreamOther], n);
        s_[kStreamTail].append(reinterpret_cast<const char*>(rec) + kHeader, n);
        return;
    }
    Shape shape = shape_of(h.type, len, format_);
    size_t nw = (len - kHeader) / 8;
    const uint8_t* body = rec + kHeader;
    std::vector<uint64_t>& w = words_; // reused: this runs for every record of a live capture
    w.resize(nw);
    for (size_t j = 0; j < nw; j++)
        w[j] = word(body + j * 8);
    uint64_t key = 0;
    if (shape.key >= 0) {
        key = w[size_t(shape.key)];
        uint64_t& last = st_.last_key[thread_key(h.type, h.tid)];
        put(s_[kStreamKey], zigzag(key - last));
        last = key;
    }
    uint64_t context = key;
    if (shape.self >= 0) {
        uint64_t self = w[size_t(shape.self)];
        auto& mru = st_.selves[{h.type, h.tgid, key}];
        size_t i = static_cast<size_t>(std::find(mru.begin(), mru.end(), self) - mru.begin());
        put(s_[kStreamKey], i);
        if (i == mru.size())
            put(s_[kStreamKey], zigzag(self - mru[0]));
        touch_self(mru, i, self);
        context = with_self(key, self);
    }
    auto& prev = previous_words(st_, h, len, shape, context, nw);
    for (size_t j = 0; j < nw; j++)
        if (context_word(shape, j))
            put(s_[shape.stream], zigzag(w[j] - prev[j]));
    if (shape.counters >= 0) {
        auto& lc = st_.last_counters[h.tid];
        if (lc.empty())
            lc.assign(kCounterWords + 1, 0), lc[kCounterWords] = h.ts_ns;
        for (size_t c = 0; c < kCounterWords; c++) {
            uint64_t d = w[size_t(shape.counters) + c] - lc[c];
            if (c == 0) // on-CPU time grows with wall time while the thread runs: the residual is what it did not
                d -= h.ts_ns - lc[kCounterWords];
            put(s_[kStreamCounters], zigzag(d));
            lc[c] = w[size_t(shape.counters) + c];
        }
        lc[kCounterWords] = h.ts_ns;
    }
    prev.swap(w);
    s_[kStreamTail].append(reinterpret_cast<const char*>(body) + nw * 8, (len - kHeader) % 8);
}

std::string BlockEncoder::finish(int level)
{
    std::string out;
    auto u32 = [&](uint64_t v) {
        uint32_t x = static_cast<uint32_t>(v);
        out.append(reinterpret_cast<const char*>(&x), 4);
    };
    std::array<std::string, kStreamCount> packed;
    for (size_t i = 0; i < kStreamCount; i++) {
        uLongf n = compressBound(static_cast<uLong>(s_[i].size()));
        packed[i].resize(n);
        if (compress2(reinterpret_cast<Bytef*>(packed[i].data()), &n, reinterpret_cast<const Bytef*>(s_[i].data()),
                      static_cast<uLong>(s_[i].size()), level) != Z_OK)
            throw std::runtime_error("zlib: cannot compress a record block");
        packed[i].resize(n);
    }
    u32(records_);
    u32(kStreamCount);
    for (size_t i = 0; i < kStreamCount; i++) {
        u32(s_[i].size());
        u32(packed[i].size());
    }
    for (const auto& p : packed)
        out += p;
    *this = BlockEncoder(format_);
    return out;
}

DecodedBlock decode_streams(const Streams& s, uint32_t n, uint32_t format)
{
    if (format != 2 && format != 3)
        throw CodecError(fmt::format("unknown block format {}", format));
    std::array<Cursor, kStreamCount> c;
    for (size_t i = 0; i < kStreamCount; i++)
        c[i].s = &s[i];
    CodecState st;
    DecodedBlock out;
    out.ends.reserve(std::min<uint32_t>(n, kMaxBlockRecords));
    size_t total = 0;
    std::vector<uint64_t> w;
    for (uint32_t r = 0; r < n; r++) {
        lotus_event_header h{};
        uint64_t type = c[kStreamType].get();
        if (type > UINT32_MAX)
            throw CodecError("bad record type");
        h.type = static_cast<uint32_t>(type);
        uint8_t wi = c[kStreamWho].byte();
        if (wi == 0xff) {
            uint64_t tgid = c[kStreamWho].get(), tid = c[kStreamWho].get();
            if (tgid > UINT32_MAX || tid > UINT32_MAX)
                throw CodecError("bad pid");
            h.tgid = static_cast<uint32_t>(tgid), h.tid = static_cast<uint32_t>(tid);
        } else {
            if (wi >= st.who.size())
                throw CodecError("bad thread reference");
            std::tie(h.tgid, h.tid) = st.who[wi];
        }
        who_index(st, h.tgid, h.tid);
        uint64_t cpu = c[kStreamCpu].get();
        if (format >= 3)
            cpu = predicted_value(st.last_cpu, h.tid, cpu, "CPU");
        if (cpu > UINT32_MAX)
            throw CodecError("bad CPU");
        h.cpu = static_cast<uint32_t>(cpu);
        h.ts_ns = predicted_ts(st, h.tid) + unzigzag(c[kStreamTs].get());
        st.last_ts[h.tid] = h.ts_ns;
        st.block_last_ts = h.ts_ns;
        uint64_t len = c[kStreamLen].get();
        if (format >= 3)
            len = predicted_value(st.last_len, h.type, len, "length");
        if (len < kHeader || len > 65536)
            throw CodecError(fmt::format("bad record length {}", len));
        if ((total += len) > kMaxBlockBytes)
            throw CodecError("a block decodes to more than a block may hold");
        size_t at = out.bytes.size();
        out.bytes.resize(at + len);
        uint8_t* rec = out.bytes.data() + at;
        memcpy(rec, &h, kHeader);
        if (may_repeat(h.type)) {
            uint64_t ref = c[kStreamType].get();
            if (ref) {
                if (ref > st.bodies.size() || st.bodies[ref - 1].size() != len - kHeader)
                    throw CodecError("bad reference to an earlier record");
                memcpy(rec + kHeader, st.bodies[ref - 1].data(), len - kHeader);
                out.ends.push_back(static_cast<uint32_t>(at + len));
                continue;
            }
        }
        if (raw_body(h.type, format)) {
            auto& tc = c[kStreamTail];
            uint64_t n = c[kStreamOther].get();
            if (n > len - kHeader || tc.pos + n > s[kStreamTail].size())
                throw CodecError("bad text record");
            memcpy(rec + kHeader, s[kStreamTail].data() + tc.pos, n);
            memset(rec + kHeader + n, 0, len - kHeader - n);
            tc.pos += n;
            st.bodies.emplace_back(reinterpret_cast<const char*>(rec) + kHeader, len - kHeader); // (may repeat)
            out.ends.push_back(static_cast<uint32_t>(at + len));
            continue;
        }
        Shape shape = shape_of(h.type, len, format);
        size_t nw = (len - kHeader) / 8;
        w.assign(nw, 0);
        uint64_t key = 0;
        if (shape.key >= 0) {
            uint64_t& last = st.last_key[thread_key(h.type, h.tid)];
            key = last + unzigzag(c[kStreamKey].get());
            last = key;
            w[size_t(shape.key)] = key;
        }
        uint64_t context = key;
        if (shape.self >= 0) {
            auto& mru = st.selves[{h.type, h.tgid, key}];
            uint64_t i = c[kStreamKey].get();
            if (i > mru.size())
                throw CodecError("bad reference to an earlier self");
            uint64_t self = i < mru.size() ? mru[i] : mru[0] + unzigzag(c[kStreamKey].get());
            touch_self(mru, static_cast<size_t>(i), self);
            w[size_t(shape.self)] = self;
            context = with_self(key, self);
        }
        auto& prev = previous_words(st, h, len, shape, context, nw);
        for (size_t j = 0; j < nw; j++)
            if (context_word(shape, j))
                w[j] = prev[j] + unzigzag(c[shape.stream].get());
        if (shape.counters >= 0) {
            auto& lc = st.last_counters[h.tid];
            if (lc.empty())
                lc.assign(kCounterWords + 1, 0), lc[kCounterWords] = h.ts_ns;
            for (size_t cw = 0; cw < kCounterWords; cw++) {
                uint64_t d = unzigzag(c[kStreamCounters].get());
                if (cw == 0)
                    d += h.ts_ns - lc[kCounterWords];
                w[size_t(shape.counters) + cw] = lc[cw] + d;
                lc[cw] = w[size_t(shape.counters) + cw];
            }
            lc[kCounterWords] = h.ts_ns;
        }
        if (nw) // (w.data() may be null: memcpy must not see it even for 0 bytes)
            memcpy(rec + kHeader, w.data(), nw * 8);
        prev.swap(w);
        size_t tail = (len - kHeader) % 8;
        auto& ts = c[kStreamTail];
        if (ts.pos + tail > s[kStreamTail].size())
            throw CodecError("a stream ends early");
        memcpy(rec + kHeader + nw * 8, s[kStreamTail].data() + ts.pos, tail);
        ts.pos += tail;
        if (may_repeat(h.type))
            st.bodies.emplace_back(reinterpret_cast<const char*>(rec) + kHeader, len - kHeader);
        out.ends.push_back(static_cast<uint32_t>(at + len));
    }
    for (size_t i = 0; i < kStreamCount; i++)
        if (c[i].pos != s[i].size())
            throw CodecError("a stream holds more than its records");
    return out;
}

} // namespace lotus::record
