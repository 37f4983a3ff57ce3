// The resource reader on this test's own process: its files kept open between readings still follow the threads
// that come and go, and a process that ended reads as gone.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "proc/proc_usage.h"

using lotus::proc::ProcUsageReader;

namespace {

// Threads that switched voluntarily a few times and now wait, so that their counts hold still.
class Sleepers {
public:
    explicit Sleepers(int n)
    {
        for (int i = 0; i < n; i++)
            threads_.emplace_back([this] {
                for (int k = 0; k < 5; k++)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                std::unique_lock<std::mutex> lock(m_);
                ready_++;
                cv_.notify_all();
                cv_.wait(lock, [this] { return done_; });
            });
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return ready_ == n; });
    }
    ~Sleepers()
    {
        {
            std::lock_guard<std::mutex> lock(m_);
            done_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_)
            t.join();
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    int ready_ = 0;
    bool done_ = false;
    std::vector<std::thread> threads_;
};

// The voluntary switches of every thread of this process, each thread's status read on its own; and how many.
std::pair<uint64_t, uint32_t> truth()
{
    uint64_t sum = 0;
    uint32_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
        std::ifstream f(e.path() / "status");
        std::string line;
        while (std::getline(f, line))
            if (line.rfind("voluntary_ctxt_switches:", 0) == 0)
                sum += std::stoull(line.substr(line.find(':') + 1));
        n++;
    }
    return {sum, n};
}

} // namespace

TEST(ProcUsageReader, FollowsThreadsThatComeAndGo)
{
    constexpr uint64_t kLateSwitches = 2 + 3; // this thread's, and one for each of 3 sleepers
    ProcUsageReader reader;
    std::optional<Sleepers> first(3);
    auto u = reader.read(getpid(), false);
    ASSERT_TRUE(u);
    auto [sum, n] = truth();
    EXPECT_EQ(u->threads, n);
    EXPECT_GE(u->threads, 4u);
    // the counts may grow between the two readings: this thread's own (reading a file can block), and each
    // sleeper's last wait, which can block after it said it was ready (a busy host: 3 more in one run of 8)
    EXPECT_LE(u->nvcsw, sum);
    EXPECT_GE(u->nvcsw + kLateSwitches, sum);
    EXPECT_GE(u->nvcsw, 15u); // each sleeper's 5 sleeps
    EXPECT_GT(u->rss_kb, 0u);
    EXPECT_GE(u->hwm_kb, u->rss_kb);

    first.reset();      // three threads end ...
    Sleepers second(3); // ... and three others start: as many threads as before, but not the same
    u = reader.read(getpid(), true);
    ASSERT_TRUE(u);
    std::tie(sum, n) = truth();
    EXPECT_EQ(u->threads, n);
    EXPECT_LE(u->nvcsw, sum);
    EXPECT_GE(u->nvcsw + kLateSwitches, sum);
    ASSERT_TRUE(u->pss_kb);
    EXPECT_GT(*u->pss_kb, 0u);
}

// A thread that did not run between two readings keeps its counts without its status being read again; once it
// runs and switches again, the next reading has those switches.
TEST(ProcUsageReader, AThreadThatSwitchesAgainIsCountedAgain)
{
    ProcUsageReader reader;
    std::mutex m;
    std::condition_variable cv;
    int rounds = 0, done_rounds = 0;
    bool stop = false;
    std::thread t([&] {
        std::unique_lock<std::mutex> lock(m);
        for (int seen = 0;;) {
            cv.wait(lock, [&] { return stop || rounds > seen; });
            if (stop)
                return;
            seen = rounds;
            lock.unlock();
            for (int k = 0; k < 20; k++)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            lock.lock();
            done_rounds = seen;
            cv.notify_all();
        }
    });
    auto round = [&] {
        std::unique_lock<std::mutex> lock(m);
        rounds++;
        cv.notify_all();
        cv.wait(lock, [&] { return done_rounds == rounds; });
    };
    round();
    auto a = reader.read(getpid(), false);
    auto b = reader.read(getpid(), false); // the thread has not run since: its counts as they were
    round();
    auto c = reader.read(getpid(), false);
    auto [sum, n] = truth();
    {
        std::lock_guard<std::mutex> lock(m);
        stop = true;
    }
    cv.notify_all();
    t.join();
    ASSERT_TRUE(a && b && c);
    EXPECT_LE(b->nvcsw, a->nvcsw + 2); // this thread's own switches may grow
    EXPECT_GE(c->nvcsw, b->nvcsw + 20);
    EXPECT_LE(c->nvcsw, sum);
    EXPECT_GE(c->nvcsw + 2, sum);
}

TEST(ProcUsageReader, AProcessThatEndedIsGone)
{
    ProcUsageReader reader;
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        char c;
        close(pipefd[1]);
        (void)!read(pipefd[0], &c, 1); // until the parent closes its end
        _exit(0);
    }
    close(pipefd[0]);
    EXPECT_TRUE(reader.read(child, false)); // alive: its files are now open
    close(pipefd[1]);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_FALSE(reader.read(child, false));
    EXPECT_FALSE(reader.read(child, false));
}

using lotus::proc::PssSchedule;
constexpr uint64_t kMs = 1'000'000;

TEST(PssSchedule, AutoEveryTwoSecondsWhileTheWalksAreCheap)
{
    PssSchedule s(-1, 2, 1000 * kMs);
    EXPECT_FALSE(s.due(1000 * kMs));
    EXPECT_FALSE(s.due(2999 * kMs));
    EXPECT_TRUE(s.due(3000 * kMs));
    s.done(3000 * kMs, 3 * kMs); // 3 ms of walks: 0.1 % of 2 CPUs for 1.5 s, under the 2 s floor
    EXPECT_EQ(s.next_ns(), 5000 * kMs);
}

TEST(PssSchedule, AutoSpacesCostlyWalksWithinTheBudget)
{
    PssSchedule s(-1, 2, 0);
    s.done(2000 * kMs, 30 * kMs); // 30 ms of walks on 2 CPUs: 0.1 % of their time over 15 s
    EXPECT_EQ(s.next_ns(), 17000 * kMs);
    PssSchedule wide(-1, 16, 0);
    wide.done(2000 * kMs, 30 * kMs); // 16 CPUs: 1.875 s, so the 2 s floor
    EXPECT_EQ(wide.next_ns(), 4000 * kMs);
}

TEST(PssSchedule, FixedIntervalOrNever)
{
    PssSchedule fixed(500, 2, 0);
    EXPECT_TRUE(fixed.due(500 * kMs));
    fixed.done(600 * kMs, 100 * kMs); // whatever the walks cost
    EXPECT_EQ(fixed.next_ns(), 1100 * kMs);
    PssSchedule never(0, 2, 0);
    EXPECT_FALSE(never.due(UINT64_MAX));
}

TEST(PssSchedule, WorkersThatEndBeforeTheyCanBeJudgedPushTheNextOnesFirstWalkBack)
{
    PssSchedule s(-1, 2, 0);
    s.seen({10}, 0);
    s.seen({10, 11}, 100 * kMs);   // a worker of a short epoch: walked once (at 1.1 s), gone at 1.5 s
    s.young_done(11, 1100 * kMs, 5 * kMs);
    s.seen({10}, 1500 * kMs);      // ended with 1 walk of the 4 a judgement needs: the next starts 2 s on
    s.seen({10, 12}, 1600 * kMs);
    EXPECT_FALSE(s.young_due(12, 3599 * kMs));
    EXPECT_TRUE(s.young_due(12, 3600 * kMs));
    s.seen({10}, 3000 * kMs);      // ended unwalked: 4 s
    s.seen({10, 13}, 3100 * kMs);
    EXPECT_FALSE(s.young_due(13, 7099 * kMs));
    for (uint32_t pid = 14; pid < 20; ++pid) { // more short ones: at most 8 s
        s.seen({10}, pid * 10'000 * kMs);
        s.seen({10, pid}, pid * 10'000 * kMs + kMs);
    }
    EXPECT_FALSE(s.young_due(19, 190'000 * kMs + 8000 * kMs));
    EXPECT_TRUE(s.young_due(19, 190'000 * kMs + 8001 * kMs));
    for (uint64_t t = 198'001; t < 200'000; t += 500) // a worker that lives: judged (4 walks), it halves the delay
        s.young_done(19, t * kMs, 5 * kMs);
    s.seen({10}, 200'000 * kMs);
    s.seen({10, 20}, 200'100 * kMs);
    EXPECT_FALSE(s.young_due(20, 204'099 * kMs));
    EXPECT_TRUE(s.young_due(20, 204'100 * kMs));
}

TEST(PssSchedule, ProcessesForkedWhileTracedAreWalkedOftenInTheirFirstSeconds)
{
    PssSchedule s(-1, 2, 0);
    s.seen({10}, 100 * kMs); // the first sweep: the job as it was (its main process) is not young
    EXPECT_FALSE(s.young_due(10, 100 * kMs));
    s.seen({10, 11, 12}, 200 * kMs); // two workers forked since: first walked 1 s on (not at birth)
    EXPECT_FALSE(s.young_due(11, 1199 * kMs));
    EXPECT_TRUE(s.young_due(11, 1200 * kMs));
    s.young_done(11, 1200 * kMs, 2 * kMs); // 2 ms x 2 young processes within 1 % of 2 CPUs: 0.2 s, so the 0.5 s floor
    EXPECT_FALSE(s.young_due(11, 1699 * kMs));
    EXPECT_TRUE(s.young_due(11, 1700 * kMs));
    s.young_done(12, 1200 * kMs, 8 * kMs); // 8 ms each: 0.8 s
    EXPECT_FALSE(s.young_due(12, 1999 * kMs));
    EXPECT_TRUE(s.young_due(12, 2000 * kMs));
    s.seen({10, 11, 12}, 30'300 * kMs); // 30 s on: no longer young
    EXPECT_FALSE(s.young_due(11, 30'300 * kMs));
    PssSchedule fixed(500, 2, 0); // a chosen interval: no more
    fixed.seen({10}, 0);
    fixed.seen({10, 11}, 100 * kMs);
    EXPECT_FALSE(fixed.young_due(11, 100 * kMs));
}
