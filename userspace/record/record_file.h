// The record file (--record FILE, --replay FILE): the raw event stream of a run, replayable offline through
// the same engine. Format: docs/record-format.md.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/output_file.h"
#include "record/record_codec.h"
#include "model/user_records.h"

namespace lotus::record {

// User-space records, after the kernel's (types 1..99 are lotus_abi.h's): model/user_records.h.
using model::kRecordSlots;
using model::kRecordProcess;
using model::kRecordEnd;

using model::RecordEnd;
using model::RecordProcess;
using model::RecordSlots;

struct RecordHeader {
    uint64_t t0_ns = 0;
    uint32_t root_pid = 0;
    std::string meta_json; // python version, interpreter, layout source
};

struct RecordError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class RecordWriter {
public:
    // Throws std::runtime_error when the file cannot be created; a later failure goes to on_failure, once,
    // and the records after it are dropped (the file is then left as it was).
    RecordWriter(const std::string& path, const RecordHeader& header, common::OutputFailure on_failure = {},
                 double reserve_pct = common::kDefaultDiskReserve);
    // Opened first (before tracing, to check the destination), its header written by begin().
    // reserve_pct: --disk-reserve, as for every output (common/output_file.h); cuts: the run's list of outputs cut;
    // space: the file system's space (tests; empty: fstatvfs).
    explicit RecordWriter(const std::string& path, common::OutputFailure on_failure = {},
                          double reserve_pct = common::kDefaultDiskReserve, common::OutputCuts* cuts = nullptr,
                          common::FsSpaceProbe space = {});
    void begin(const RecordHeader& header);
    RecordWriter(const RecordWriter&) = delete;
    RecordWriter& operator=(const RecordWriter&) = delete;
    void write(const void* data, size_t len);
    void flush();  // writes the records buffered so far as a block
    bool close();  // writes the last block and puts the file in place; false when this output failed
    bool failed() const { return out_.failed(); }
    const std::string& path() const { return out_.path(); }

private:
    common::OutputFile out_;
    BlockEncoder block_;
};

class RecordReader {
public:
    explicit RecordReader(const std::string& path); // throws RecordError: unreadable, not a record file
    RecordReader(FILE* f, const std::string& name);  // takes the stream (e.g. fmemopen'd: the fuzzer)
    ~RecordReader();
    const RecordHeader& header() const { return header_; }
    // The next record, or false at a clean end; throws RecordError when the file is truncated or corrupt.
    bool next(std::vector<uint8_t>& record);

private:
    void read_header();
    void read_header_or_close();
    bool read_block(DecodedBlock& out); // false at the end
    bool next_legacy(std::vector<uint8_t>& record);
    void start_prefetch();
    void stop_prefetch();
    bool take_block();
    std::string path_;
    FILE* f_ = nullptr;
    RecordHeader header_;
    uint64_t offset_ = 0;
    bool legacy_ = false;                   // format 1
    uint32_t format_ = 0;
    DecodedBlock block_; // format 2: the decoded block being read
    size_t next_in_block_ = 0;
    // The prefetching thread and what it hands over (blocks, the end, or the error that stopped it).
    struct Prefetched {
        DecodedBlock records;
        bool more = true;
        std::exception_ptr error;
    };
    std::thread prefetch_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Prefetched> queue_;
    bool stop_ = false;
    bool done_ = false;
};

} // namespace lotus::record
