// A CaptureRequests for engine tests: each request to a function the test gives (none: not taken).
#pragma once
#include <cstdint>
#include <functional>
#include <utility>

#include "model/capture_requests.h"
#include "model/rules.h"

namespace lotus::test {

struct FakeRequests : model::CaptureRequests {
    using Roles =
        std::function<void(uint32_t tgid, uint32_t space, uint64_t code, uint64_t fingerprint, const model::CodeRole&)>;
    using Types = std::function<void(uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags)>;
    FakeRequests() = default;
    explicit FakeRequests(Roles r, Types t = {}) : roles(std::move(r)), types(std::move(t)) {}

    Roles roles;
    Types types;
    std::function<void(uint32_t tgid, uint64_t object, uint32_t kind)> objects; // none: reads no objects
    std::function<void(uint32_t tgid, bool on)> calls;                            // none: switches nothing
    model::TrainerCalls mode = model::TrainerCalls::Auto;

    void code_role(uint32_t tgid, uint32_t space, uint64_t code, uint64_t fingerprint,
                   const model::CodeRole& role) override
    {
        if (roles)
            roles(tgid, space, code, fingerprint, role);
    }
    void type_role(uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags) override
    {
        if (types)
            types(space, type, fingerprint, flags);
    }
    bool reads_objects() const override { return static_cast<bool>(objects); }
    void describe_object(uint32_t tgid, uint64_t object, uint32_t kind) override { objects(tgid, object, kind); }
    model::TrainerCalls trainer_calls() const override { return mode; }
    bool switches_object_calls() const override { return static_cast<bool>(calls); }
    void object_calls(uint32_t tgid, bool on) override { calls(tgid, on); }
};

} // namespace lotus::test
