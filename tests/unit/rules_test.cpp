#include <gtest/gtest.h>

#include "lotus_abi.h"
#include "model/rules.h"

using lotus::model::CodeInfo;
using lotus::model::Rules;

TEST(Rules, ComposeIsAPipeline)
{
    Rules r;
    auto role = r.classify({"Compose.__call__", "/torchvision/transforms/transforms.py", 90});
    EXPECT_TRUE(role.pipeline);
    EXPECT_TRUE(role.flags & LOTUS_ROLE_PIPELINE);
    EXPECT_FALSE(role.flags & LOTUS_ROLE_SKIP);
}

TEST(Rules, UserPipelineGlobs)
{
    Rules r({"My*Pipeline"});
    EXPECT_TRUE(r.classify({"MyImagePipeline.__call__", "a.py", 1}).pipeline);
    EXPECT_FALSE(r.classify({"MyImagePipeline.run", "a.py", 1}).pipeline);
    EXPECT_TRUE(r.classify({"Compose.__call__", "a.py", 1}).pipeline);
}

TEST(Rules, WorkerLoopCapturesWorkerId)
{
    Rules r;
    auto role = r.classify({"_worker_loop", "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py", 1});
    EXPECT_TRUE(role.worker_loop);
    EXPECT_TRUE(role.flags & LOTUS_ROLE_CAPTURE);
    EXPECT_EQ(role.capture_locals, (std::vector<std::string>{"worker_id", "idx"}));
    EXPECT_FALSE(r.classify({"_worker_loop", "/home/me/mine.py", 1}).worker_loop);
}

TEST(Rules, GetitemAndOthers)
{
    Rules r;
    auto getitem = r.classify({"DatasetFolder.__getitem__", "f.py", 1});
    EXPECT_TRUE(getitem.getitem);
    EXPECT_TRUE(getitem.flags & LOTUS_ROLE_ARG1); // BPF reads the index argument of these frames only
    auto other = r.classify({"Module._call_impl", "f.py", 1});
    EXPECT_TRUE(other.flags & LOTUS_ROLE_SKIP);
    EXPECT_FALSE(other.flags & LOTUS_ROLE_ARG1);
    EXPECT_FALSE(other.flags & LOTUS_ROLE_OBJ1);
    EXPECT_TRUE(other.flags & LOTUS_ROLE_CLASSIFIED);
    auto init = r.classify({"_MultiProcessingDataLoaderIter.__init__", "/x/torch/utils/data/dataloader.py", 1});
    EXPECT_TRUE(init.iter_init);
    EXPECT_TRUE(init.flags & LOTUS_ROLE_OBJ1); // BPF reads the DataLoader argument of these entries only
}

TEST(Rules, OpNames)
{
    Rules r;
    std::string crop = "RandomResizedCrop", builtin = "torchvision.Thing";
    EXPECT_EQ(r.op_name({"Module._call_impl", "", 0}, &crop), "RandomResizedCrop");
    EXPECT_EQ(r.op_name({"Module._wrapped_call_impl", "", 0}, &crop), "RandomResizedCrop");
    EXPECT_EQ(r.op_name({"Lambda.__call__", "", 0}, &builtin), "Thing");
    EXPECT_EQ(r.op_name({"ToTensor.__call__", "", 0}, nullptr), "ToTensor");
    EXPECT_EQ(r.op_name({"resize", "", 0}, &crop), "resize");
    EXPECT_EQ(r.op_name({"make.<locals>.f", "", 0}, &crop), "f");
}

TEST(Rules, SpanGlobsWithOptionalFile)
{
    Rules r({}, {"Scale.__call__", "*/mine.py:help*", "never_*"});
    EXPECT_TRUE(r.classify({"Scale.__call__", "/a/b.py", 1}).span);
    EXPECT_FALSE(r.classify({"Scale.__call__", "/a/b.py", 1}).flags & LOTUS_ROLE_SKIP);
    EXPECT_TRUE(r.classify({"helper", "/x/mine.py", 1}).span);
    EXPECT_FALSE(r.classify({"helper", "/x/other.py", 1}).span);
    EXPECT_EQ(r.unmatched_spans(), std::vector<std::string>{"never_*"});
}
