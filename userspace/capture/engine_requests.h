// The engine's requests (model::CaptureRequests) answered in a live session: roles into BPF's maps (RoleWriter),
// objects read from the target (ObjectReads), --trainer-calls' object-calls probe taken away and put back
// (ObjectCallsSwitch). Each part joins as the session makes it (none is owned); a request to a part not there
// is not taken, and reads_objects and switches_object_calls say so.
#pragma once
#include <cstdint>

#include "model/capture_requests.h"
#include "object_calls_switch.h"
#include "object_reads.h"
#include "role_writer.h"

namespace lotus::capture {

class EngineRequests final : public model::CaptureRequests {
public:
    explicit EngineRequests(model::TrainerCalls mode) : mode_(mode) {}

    void set_roles(RoleWriter* roles) { roles_ = roles; }
    void set_object_reads(ObjectReads* reads) { reads_ = reads; }
    void set_calls_switch(ObjectCallsSwitch* calls) { calls_ = calls; }

    void code_role(uint32_t tgid, uint32_t space, uint64_t code, uint64_t fingerprint,
                   const model::CodeRole& role) override
    {
        if (roles_)
            roles_->code_role(tgid, space, code, fingerprint, role);
    }
    void type_role(uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags) override
    {
        if (roles_)
            roles_->type_role(space, type, fingerprint, flags);
    }
    bool reads_objects() const override { return reads_ != nullptr; }
    void describe_object(uint32_t tgid, uint64_t object, uint32_t kind) override { reads_->read(tgid, object, kind); }
    model::TrainerCalls trainer_calls() const override { return mode_; }
    bool switches_object_calls() const override { return calls_ != nullptr; }
    void object_calls(uint32_t tgid, bool on) override { calls_->ask(tgid, on); }

private:
    model::TrainerCalls mode_;
    RoleWriter* roles_ = nullptr;
    ObjectReads* reads_ = nullptr;
    ObjectCallsSwitch* calls_ = nullptr;
};

} // namespace lotus::capture
