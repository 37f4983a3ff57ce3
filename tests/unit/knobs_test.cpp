// The environment knobs' one table (common/knobs.h) and its documentation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/knobs.h"

using namespace lotus;

TEST(Knobs, ASwitchIsSetNotEmptyAndNotZero)
{
    unsetenv("LOTUS_PER_CPU_SAMPLING");
    EXPECT_FALSE(common::knob_on("LOTUS_PER_CPU_SAMPLING"));
    EXPECT_EQ(common::knob_value("LOTUS_PER_CPU_SAMPLING"), nullptr);
    for (const char* off : {"", "0"}) {
        setenv("LOTUS_PER_CPU_SAMPLING", off, 1);
        EXPECT_FALSE(common::knob_on("LOTUS_PER_CPU_SAMPLING")) << off;
    }
    setenv("LOTUS_PER_CPU_SAMPLING", "1", 1);
    EXPECT_TRUE(common::knob_on("LOTUS_PER_CPU_SAMPLING"));
    unsetenv("LOTUS_PER_CPU_SAMPLING");
}

TEST(Knobs, AKnobWithoutItsRowIsRefused)
{
    EXPECT_THROW(common::knob_on("LOTUS_NOT_A_KNOB"), std::logic_error);
}

TEST(Knobs, DocumentedAsInTheTable)
{
    std::ifstream f(LOTUS_SOURCE_DIR "/docs/how-it-works.md");
    ASSERT_TRUE(f) << "docs/how-it-works.md";
    std::stringstream ss;
    ss << f.rdbuf();
    std::string doc = ss.str();
    auto section = doc.find("## Environment knobs");
    ASSERT_NE(section, std::string::npos);
    size_t rows = 0;
    for (auto at = doc.find("\n| `LOTUS_", section); at != std::string::npos; at = doc.find("\n| `LOTUS_", at + 1))
        rows++;
    EXPECT_EQ(rows, std::size(common::kKnobs));
    for (const auto& k : common::kKnobs)
        EXPECT_NE(doc.find("| `" + std::string(k.name) + "` | " + std::string(k.effect) + " |", section),
                  std::string::npos)
            << k.name;
}
