#include "cpython/line_table.h"

namespace lotus::cpython {

namespace {

// 3.10 (Objects/lnotab_notes.txt): (start delta, line delta) byte pairs; a line delta of -128 marks no line, and
// the line accumulates over every pair, empty ranges included.
std::optional<int> line_310(const uint8_t* t, size_t len, int firstlineno, int addr)
{
    int end = 0, line = firstlineno;
    for (size_t i = 0; i + 1 < len; i += 2) {
        int start = end;
        end += t[i];
        int8_t delta = static_cast<int8_t>(t[i + 1]);
        bool none = delta == -128;
        if (!none)
            line += delta;
        if (addr >= start && addr < end)
            return none ? std::nullopt : std::optional<int>(line);
    }
    return std::nullopt;
}

// 3.11+ (Objects/locations.md): entries of a first byte 1ccccnnn (code c, n + 1 code units), then varints.
struct Reader {
    const uint8_t* t;
    size_t len, i = 0;
    bool ok = true;
    unsigned byte()
    {
        if (i >= len) {
            ok = false;
            return 0;
        }
        return t[i++];
    }
    unsigned varint()
    {
        unsigned b = byte(), v = b & 63, shift = 0;
        while (ok && (b & 64) && shift < 28) {
            b = byte();
            shift += 6;
            v |= (b & 63) << shift;
        }
        return v;
    }
    int svarint()
    {
        unsigned v = varint();
        return (v & 1) ? -static_cast<int>(v >> 1) : static_cast<int>(v >> 1);
    }
};

std::optional<int> line_311(const uint8_t* t, size_t len, int firstlineno, int addr)
{
    Reader r{t, len};
    int end = 0, line = firstlineno;
    while (r.i < len) {
        unsigned first = r.byte();
        if (!(first & 0x80))
            return std::nullopt; // not at an entry's start: a torn read
        int code = (first >> 3) & 15, start = end;
        end += ((first & 7) + 1) * 2;
        bool none = code == 15;
        if (code == 14) { // long form: line delta, end line delta, column, end column
            line += r.svarint();
            r.varint();
            r.varint();
            r.varint();
        } else if (code == 13) { // no columns
            line += r.svarint();
        } else if (code >= 10 && code <= 12) { // one line: the delta in the code, then two column bytes
            line += code - 10;
            r.byte();
            r.byte();
        } else if (code < 10) { // short form: same line, one column byte
            r.byte();
        }
        if (!r.ok)
            return std::nullopt;
        if (addr >= start && addr < end)
            return none ? std::nullopt : std::optional<int>(line);
    }
    return std::nullopt;
}

} // namespace

std::optional<int> line_for(const uint8_t* table, size_t len, int format, int firstlineno, int addr)
{
    if (addr < 0) // not started yet (3.11's prev_instr is one before the first instruction): as CPython says
        return firstlineno;
    if (!table)
        return std::nullopt;
    if (format == 310)
        return line_310(table, len, firstlineno, addr);
    if (format == 311)
        return line_311(table, len, firstlineno, addr);
    return std::nullopt;
}

} // namespace lotus::cpython
