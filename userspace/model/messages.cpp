#include "messages.h"

#include <cstring>
#include <string_view>

#include "model/framework.h"

namespace lotus::model {

namespace {

// A SHORT_BINUNICODE string at data[at] (optionally followed by MEMOIZE); its text, and where the next opcode is.
bool short_str(const uint8_t* data, size_t n, size_t& at, std::string_view& text)
{
    if (at + 2 > n || data[at] != 0x8c)
        return false;
    size_t len = data[at + 1];
    size_t avail = n - (at + 2);
    text = std::string_view(reinterpret_cast<const char*>(data + at + 2), len < avail ? len : avail);
    at += 2 + len;
    if (at < n && data[at] == 0x94) // MEMOIZE
        at++;
    return true;
}

// A global of torch's worker module whose name begins with `prefix` (the name may be cut by the capture).
bool worker_global(const uint8_t* data, size_t n, size_t at, std::string_view module_name, std::string_view prefix)
{
    std::string_view module, name;
    if (prefix.empty() || !short_str(data, n, at, module) || module != module_name || !short_str(data, n, at, name))
        return false;
    return name.size() >= prefix.size() ? name.substr(0, prefix.size()) == prefix
                                         : !name.empty() && prefix.substr(0, name.size()) == name && name.size() >= 8;
}

} // namespace

QueueMessage parse_queue_message(const uint8_t* data, size_t n, const framework::Framework& fw)
{
    QueueMessage m;
    // PROTO 4|5, FRAME <8-byte length>
    if (n < 13 || data[0] != 0x80 || (data[1] != 4 && data[1] != 5) || data[2] != 0x95)
        return m;
    size_t at = 11;
    int64_t index = -1;
    switch (data[at]) {
    case 'K': // BININT1
        index = data[at + 1];
        at += 2;
        break;
    case 'M': // BININT2
        if (at + 3 > n)
            return m;
        index = data[at + 1] | data[at + 2] << 8;
        at += 3;
        break;
    case 'J': { // BININT (signed 32-bit)
        if (at + 5 > n)
            return m;
        int32_t v;
        memcpy(&v, data + at + 1, 4);
        index = v;
        at += 5;
        break;
    }
    default:
        if (worker_global(data, n, at, fw.worker_module, fw.resume_global))
            m.kind = QueueMessage::Resume;
        return m;
    }
    // A bare int is not a message of theirs; neither is a negative index.
    if (index < 0 || at >= n || data[at] == '.')
        return m;
    m.kind = QueueMessage::Indexed;
    m.index = index;
    m.stop = worker_global(data, n, at, fw.worker_module, fw.iterable_stop_global);
    // A list (EMPTY_LIST, MEMOIZE, then MARK for several items) whose first item is an int or None; None (the
    // task of an IterableDataset without batching); or an int (a map-style dataset's without batching,
    // batch_size=None: the sampler's index itself).
    m.task = at < n && (data[at] == 'N' || data[at] == 'K' || data[at] == 'M' || data[at] == 'J');
    if (at < n && data[at] == ']') {
        size_t i = at + 1;
        if (i < n && data[i] == 0x94)
            i++;
        if (i < n && data[i] == '(')
            i++;
        m.task = i < n && (data[i] == 'K' || data[i] == 'M' || data[i] == 'J' || data[i] == 'N');
    }
    return m;
}

} // namespace lotus::model
