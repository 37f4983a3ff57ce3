#include "record_file.h"

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "lotus_abi.h"

namespace lotus::exporter {

namespace {

constexpr char kMagic[8] = {'L', 'O', 'T', 'U', 'S', 'L', 'B', 'T'};
constexpr uint32_t kFormatVersion = 1;
constexpr uint32_t kMaxRecord = 1 << 16;
constexpr uint32_t kMaxMeta = 1 << 20;

} // namespace

RecordWriter::RecordWriter(const std::string& path, const RecordHeader& h) : path_(path)
{
    f_ = fopen(path.c_str(), "wb");
    if (!f_)
        throw std::runtime_error(fmt::format("cannot write {}: {}", path, strerror(errno)));
    uint32_t abi = LOTUS_ABI_VERSION, meta = static_cast<uint32_t>(h.meta_json.size());
    fwrite(kMagic, 1, 8, f_);
    fwrite(&kFormatVersion, 4, 1, f_);
    fwrite(&abi, 4, 1, f_);
    fwrite(&h.t0_ns, 8, 1, f_);
    fwrite(&h.root_pid, 4, 1, f_);
    fwrite(&meta, 4, 1, f_);
    fwrite(h.meta_json.data(), 1, h.meta_json.size(), f_);
}

RecordWriter::~RecordWriter()
{
    try {
        close();
    } catch (...) {
    }
}

void RecordWriter::write(const void* data, size_t len)
{
    if (!f_ || failed_ || len == 0 || len > kMaxRecord)
        return;
    uint32_t l = static_cast<uint32_t>(len);
    failed_ = fwrite(&l, 4, 1, f_) != 1 || fwrite(data, 1, len, f_) != len;
}

void RecordWriter::close()
{
    if (!f_)
        return;
    bool err = fclose(f_) != 0 || failed_;
    f_ = nullptr;
    if (err)
        throw std::runtime_error("error writing " + path_);
}

RecordReader::RecordReader(const std::string& path) : path_(path)
{
    f_ = fopen(path.c_str(), "rb");
    if (!f_)
        throw RecordError(fmt::format("cannot read {}: {}", path, strerror(errno)));
    read_header();
}

RecordReader::RecordReader(FILE* f, const std::string& name) : path_(name), f_(f)
{
    if (!f_)
        throw RecordError(fmt::format("cannot read {}", name));
    read_header();
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
    if (version != kFormatVersion || abi != LOTUS_ABI_VERSION)
        throw RecordError(fmt::format("{}: record format {} / event ABI {} (this lotus-bpf reads {} / {})", path,
                                      version, abi, kFormatVersion, LOTUS_ABI_VERSION));
    if (meta > kMaxMeta)
        throw RecordError(fmt::format("{}: corrupt header (metadata of {} bytes)", path, meta));
    header_.meta_json.resize(meta);
    if (meta && fread(header_.meta_json.data(), 1, meta, f_) != meta)
        throw RecordError(fmt::format("{}: truncated header", path));
    offset_ = 28 + meta;
}

RecordReader::~RecordReader()
{
    if (f_)
        fclose(f_);
}

bool RecordReader::next(std::vector<uint8_t>& record)
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

} // namespace lotus::exporter
