#include "capture/object_reads.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "common/clock.h"
#include "cpython/instance_attrs.h"
#include "cpython/remote_memory.h"

namespace lotus::capture {

namespace {

void copy_text(char* dst, size_t size, const std::string& s)
{
    size_t n = std::min(s.size(), size - 1);
    memcpy(dst, s.data(), n);
    dst[n] = 0;
}

} // namespace

void ObjectReads::read(uint32_t tgid, uint64_t object, uint32_t kind)
{
    cpython::ProcessMemory mem(static_cast<int>(tgid));
    cpython::ObjectReader r(mem, layout_, objects_);
    model::RecordObject o{};
    o.type = model::kRecordObject;
    o.tgid = o.tid = tgid;
    o.ts_ns = common::monotonic_ns();
    o.object = object;
    o.kind = kind;
    if (kind == model::kObjectLoader) {
        o.dataset = r.attr(object, "dataset").value_or(0);
        // DataLoader._index_sampler: its batch_sampler where it batches (not None), else its sampler
        auto batch_sampler = r.attr(object, "batch_sampler");
        bool none = batch_sampler && r.classes(*batch_sampler) == std::vector<std::string>{"NoneType", "object"};
        o.sampler = (none ? r.attr(object, "sampler") : batch_sampler).value_or(0);
    } else {
        o.dataset = r.attr(object, "_dataset").value_or(0);
        o.sampler = r.attr(object, "_index_sampler").value_or(0);
    }
    if (o.dataset) {
        auto classes = r.classes(o.dataset);
        if (!classes.empty())
            copy_text(o.dataset_class, sizeof(o.dataset_class), classes.front());
        if (auto root = r.attr(o.dataset, "root"))
            copy_text(o.dataset_root, sizeof(o.dataset_root), r.ascii(*root).value_or(""));
    }
    if (o.sampler) { // (more than an address to tell it by: a freed sampler's address may be another's later)
        auto classes = r.classes(o.sampler);
        std::string name = classes.empty() ? "" : classes.front();
        if (auto inner = r.attr(o.sampler, "sampler"); inner && !name.empty())
            if (auto of = r.classes(*inner); !of.empty())
                name += " of " + of.front();
        copy_text(o.sampler_class, sizeof(o.sampler_class), name);
    }
    done_.push_back(o);
}

std::vector<model::RecordObject> ObjectReads::take() { return std::exchange(done_, {}); }

} // namespace lotus::capture
