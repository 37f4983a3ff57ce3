// LOTUS_DEBUG_EVENTS=1: every record of a live run printed on stderr as it enters the stream.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "common/printable.h"
#include "lotus_abi.h"

#include "model/framework.h"
#include "model/messages.h"
#include "model/record_dispatch.h"

namespace lotus::cli {

// LOTUS_DEBUG_EVENTS=1: one line per record on stderr, to debug a reconstruction from its events; the details of
// the records that carry most of it.
class DebugDump : public model::RecordHandler {
public:
    explicit DebugDump(const model::framework::Framework& fw) : fw_(fw) {} // (the queues' pickle globals)
    void py_entry(const lotus_py_entry& e) override
    {
        line_ += fmt::format(" entry depth {} code {:#x} caller {:#x} self {:#x} type {:#x}", e.depth, e.code,
                             e.chain_len ? e.chain_code[0] : 0, e.self_obj, e.self_type);
    }
    void py_return(const lotus_py_return& r) override { line_ += fmt::format(" return depth {}", r.depth); }
    void type(const lotus_type_info& t) override
    {
        line_ += fmt::format(" type {:#x} own {} {:.{}}", t.type, t.own_space, t.name, strnlen(t.name, sizeof(t.name)));
    }
    void code(const lotus_code_info& c) override
    {
        line_ += fmt::format(" code {:#x} fingerprint {:#x} {:.{}}", c.code, c.fingerprint, c.name,
                             strnlen(c.name, sizeof(c.name)));
    }
    void msg(const lotus_msg& m) override
    {
        auto q = model::parse_queue_message(m.data, std::min<size_t>(m.nbytes, sizeof(m.data)), fw_);
        static constexpr const char* kinds[] = {"other", "indexed", "resume"};
        line_ += fmt::format(" msg {} file {:#x} {} index {}{}{}", m.dir == LOTUS_MSG_IN ? "in" : "out", m.file,
                             kinds[q.kind], q.index, q.task ? " task" : "", q.stop ? " stop" : "");
    }
    void sample(const lotus_sample& s) override { line_ += fmt::format(" sample frames {}", s.nr_ips); }

    void print(const void* data, size_t len)
    {
        auto* h = static_cast<const lotus_event_header*>(data);
        line_ = fmt::format("ev {} pid {} tid {} ts {}", h->type, h->tgid, h->tid, h->ts_ns);
        model::dispatch(data, len, *this);
        fmt::print(stderr, "{}\n", common::printable(line_));
    }

private:
    const model::framework::Framework& fw_;
    std::string line_;
};

} // namespace lotus::cli
