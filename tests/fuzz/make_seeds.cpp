// Seeds for record_fuzzer from a real record file: "\0" + the file, and "\1" + its first block's inflated
// streams (the fuzzer's two input kinds). Usage: make_seeds RECORD.lbt OUT_DIR
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <zlib.h>

#include "record/record_codec.h"

int main(int argc, char** argv)
{
    if (argc != 3)
        return 2;
    std::ifstream in(argv[1], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string file = ss.str();
    std::ofstream(std::string(argv[2]) + "/seed-file", std::ios::binary) << '\0' << file;
    std::ofstream(std::string(argv[2]) + "/seed-file-crc-fixed", std::ios::binary) << '\2' << file;
    uint32_t meta, version, v[2];
    if (file.size() < 32)
        return 1;
    memcpy(&version, file.data() + 8, 4);
    memcpy(&meta, file.data() + 28, 4);
    size_t at = 32 + meta + (version >= 4 ? 4 : 0); // format 4: the header's CRC-32
    memcpy(v, file.data() + at, 8);
    std::string out(1, '\1');
    out.append(reinterpret_cast<const char*>(&v[0]), 4);
    size_t payload = at + 8 + lotus::record::kStreamCount * 8;
    for (size_t i = 0; i < lotus::record::kStreamCount; i++) {
        uint32_t raw, packed;
        memcpy(&raw, file.data() + at + 8 + i * 8, 4);
        memcpy(&packed, file.data() + at + 12 + i * 8, 4);
        std::string s(raw, '\0');
        uLongf n = raw;
        if (uncompress(reinterpret_cast<Bytef*>(s.data()), &n, reinterpret_cast<const Bytef*>(file.data() + payload),
                       packed) != Z_OK)
            return 1;
        payload += packed;
        out.append(reinterpret_cast<const char*>(&raw), 4);
        out += s;
    }
    std::ofstream(std::string(argv[2]) + "/seed-streams", std::ios::binary) << out;
    return 0;
}
