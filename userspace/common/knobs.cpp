#include "knobs.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace lotus::common {

const char* knob_value(std::string_view name)
{
    for (const auto& k : kKnobs)
        if (k.name == name)
            return getenv(std::string(name).c_str());
    throw std::logic_error("lotus-bpf: environment knob " + std::string(name) + " is not in common/knobs.h");
}

bool knob_on(std::string_view name)
{
    const char* v = knob_value(name);
    return v && *v && strcmp(v, "0") != 0;
}

} // namespace lotus::common
