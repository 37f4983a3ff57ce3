#include <gtest/gtest.h>

#include "lotus_abi.h"
#include "model/rules.h"

using lotus::model::CodeInfo;
using lotus::model::Rules;

using lotus::model::CodeKind;
using lotus::model::TypeKind;

TEST(Rules, CallsOfObjectsArePipelineCallsWhenTheirClassIs)
{
    Rules r;
    // Whatever the code object: v1's Compose.__call__, v2's Compose.forward, nn.Module's call wrappers.
    for (const char* name : {"Compose.__call__", "Compose.forward", "Module._call_impl", "Module._wrapped_call_impl",
                             "__call__", "forward"}) {
        auto role = r.classify({name, "/x.py", 1});
        EXPECT_EQ(role.kind, CodeKind::ObjectCall) << name;
        EXPECT_TRUE(role.flags & LOTUS_ROLE_SELF_PIPELINE) << name;
        EXPECT_TRUE(role.flags & LOTUS_ROLE_SKIP) << name; // unless self is a pipeline
    }
    EXPECT_EQ(r.classify({"Compose.__repr__", "/x.py", 1}).kind, CodeKind::Other);
    for (const char* name : {"<genexpr>", "Compose.__call__.<locals>.<listcomp>", "f.<locals>.<setcomp>"}) {
        auto scope = r.classify({name, "/x.py", 1});
        EXPECT_EQ(scope.kind, CodeKind::Scope) << name;
        EXPECT_TRUE(scope.flags & LOTUS_ROLE_SCOPE) << name; // BPF judges the calls it makes by the frame below
    }
    EXPECT_TRUE(r.classify_type("Compose", {"object"}).pipeline());
    EXPECT_TRUE(r.classify_type("Compose", {"Transform", "Module", "object"}).flags & LOTUS_TYPE_PIPELINE);
    EXPECT_FALSE(r.classify_type("RandomResizedCrop", {"Transform", "Module"}).pipeline());
    EXPECT_TRUE(r.classify_type("RandomResizedCrop", {}).flags & LOTUS_TYPE_CLASSIFIED);
}

TEST(Rules, PipelineClassesByNameOrBaseAndContainers)
{
    Rules r({"My*Pipeline"});
    EXPECT_TRUE(r.classify_type("MyImagePipeline", {"object"}).pipeline());
    EXPECT_TRUE(r.classify_type("TimedCompose", {"Compose", "object"}).pipeline()); // a subclass of Compose
    EXPECT_TRUE(r.classify_type("torchvision.Compose", {}).pipeline());             // a static type's module.Class
    EXPECT_FALSE(r.classify_type("Composer", {"object"}).pipeline());
    for (const char* c : {"RandomApply", "RandomChoice", "RandomOrder"}) {
        auto t = r.classify_type(c, {"Module", "object"});
        EXPECT_TRUE(t.pipeline()) << c;
        EXPECT_TRUE(t.container()) << c;
    }
    EXPECT_FALSE(r.classify_type("Compose", {}).container());
    EXPECT_TRUE(r.classify_type("cell", {"object"}).flags & LOTUS_TYPE_CELL);
}

TEST(Rules, DataLoaderClasses)
{
    Rules r;
    EXPECT_TRUE(r.classify_type("DataLoader", {"Generic", "object"}).loader());
    EXPECT_TRUE(r.classify_type("MyLoader", {"DataLoader", "Generic"}).loader());
    auto mp = r.classify_type("_MultiProcessingDataLoaderIter", {"_BaseDataLoaderIter", "object"});
    EXPECT_TRUE(mp.loader_iterator());
    EXPECT_FALSE(mp.single_process);
    auto sp = r.classify_type("_SingleProcessDataLoaderIter", {"_BaseDataLoaderIter", "object"});
    EXPECT_TRUE(sp.loader_iterator());
    EXPECT_TRUE(sp.single_process);
    EXPECT_FALSE(r.classify_type("DataLoaderIterator", {}).loader_iterator());
    // One kind per class: a pipeline glob that matches everything leaves torch's classes what they are.
    Rules all({"*"});
    EXPECT_TRUE(all.classify_type("DataLoader", {"object"}).loader());
    EXPECT_FALSE(all.classify_type("DataLoader", {"object"}).pipeline());
    EXPECT_TRUE(all.classify_type("_SingleProcessDataLoaderIter", {"_BaseDataLoaderIter"}).loader_iterator());
    EXPECT_TRUE(all.classify_type("RandomApply", {"Module"}).container());
    EXPECT_EQ(all.classify_type("Normalize", {"Module"}).kind, TypeKind::Pipeline);
    // Only DataLoader.__iter__'s return carries the object returned (its iterator), not every op's.
    const char* dl = "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py";
    auto it = r.classify({"DataLoader.__iter__", dl, 1});
    EXPECT_EQ(it.kind, CodeKind::LoaderIter);
    EXPECT_TRUE(it.flags & LOTUS_ROLE_RETURNED);
    EXPECT_FALSE(r.classify({"_BaseDataLoaderIter.__next__", dl, 1}).flags & LOTUS_ROLE_RETURNED);
    EXPECT_FALSE(r.classify({"Normalize.forward", "/x/transforms.py", 1}).flags & LOTUS_ROLE_RETURNED);
}

TEST(Rules, WorkerLoopCapturesWorkerIdAndSpawnTheRank)
{
    Rules r;
    auto role = r.classify({"_worker_loop", "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py", 1});
    EXPECT_EQ(role.kind, CodeKind::WorkerLoop);
    EXPECT_TRUE(role.flags & LOTUS_ROLE_CAPTURE);
    EXPECT_EQ(role.capture_locals, (std::vector<std::string>{"worker_id"}));
    EXPECT_EQ(r.classify({"_worker_loop", "/home/me/mine.py", 1}).kind, CodeKind::Other);
    auto wrap = r.classify({"_wrap", "/x/torch/multiprocessing/spawn.py", 1});
    EXPECT_EQ(wrap.kind, CodeKind::RankMain);
    EXPECT_EQ(wrap.capture_locals, (std::vector<std::string>{"i"}));
}

TEST(Rules, GetitemAndDataLoaderCalls)
{
    Rules r;
    auto getitem = r.classify({"DatasetFolder.__getitem__", "f.py", 1});
    EXPECT_EQ(getitem.kind, CodeKind::GetItem);
    EXPECT_TRUE(getitem.flags & LOTUS_ROLE_ARG1); // BPF reads the index argument of these frames only
    auto other = r.classify({"Image.size", "f.py", 1});
    EXPECT_TRUE(other.flags & LOTUS_ROLE_SKIP);
    EXPECT_FALSE(other.flags & LOTUS_ROLE_ARG1);
    EXPECT_FALSE(other.flags & LOTUS_ROLE_OBJ1);
    EXPECT_TRUE(other.flags & LOTUS_ROLE_CLASSIFIED);
    auto init = r.classify({"_MultiProcessingDataLoaderIter.__init__", "/x/torch/utils/data/dataloader.py", 1});
    EXPECT_EQ(init.kind, CodeKind::IterInit);
    EXPECT_TRUE(init.flags & LOTUS_ROLE_OBJ1); // BPF reads the DataLoader argument of these entries only
    auto iter = r.classify({"DataLoader.__iter__", "/x/torch/utils/data/dataloader.py", 1});
    EXPECT_EQ(iter.kind, CodeKind::LoaderIter);
    EXPECT_FALSE(iter.flags & LOTUS_ROLE_SKIP);
    EXPECT_EQ(r.classify({"_BaseDataLoaderIter.__iter__", "/x/torch/utils/data/dataloader.py", 1}).kind, CodeKind::Other);
    auto next = r.classify({"_BaseDataLoaderIter.__next__", "/x/torch/utils/data/dataloader.py", 1});
    EXPECT_EQ(next.kind, CodeKind::LoaderNext);
    EXPECT_TRUE(next.flags & LOTUS_ROLE_WALK); // up to a rank's _wrap
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
    EXPECT_EQ(r.classify({"Scale.__call__", "/a/b.py", 1}).kind, CodeKind::Span);
    EXPECT_FALSE(r.classify({"Scale.__call__", "/a/b.py", 1}).flags & LOTUS_ROLE_SKIP);
    EXPECT_EQ(r.classify({"helper", "/x/mine.py", 1}).kind, CodeKind::Span);
    EXPECT_NE(r.classify({"helper", "/x/other.py", 1}).kind, CodeKind::Span);
    ASSERT_EQ(r.spans().size(), 3u);
    EXPECT_EQ(r.classify({"helper", "/x/mine.py", 1}).span_rule, 1);
    EXPECT_FALSE(r.spans()[0].maybe_inlined); // __call__: always called through C's tp_call
    EXPECT_TRUE(r.spans()[1].maybe_inlined);  // a function Python code may call inline (3.11+)
    EXPECT_FALSE(r.spans()[2].maybe_inlined); // (matched nothing)
}
