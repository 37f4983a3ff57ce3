// A C++ library for the native probes' exception test: lotus_try_twice calls may_throw twice, once throwing (the
// exception caught here, in the caller) and once returning. Built by the test with g++ -O2 -shared -fPIC.
#include <stdexcept>

namespace lotus_test {

__attribute__((noinline)) int may_throw(int i, bool fail)
{
    if (fail)
        throw std::runtime_error("fast path refused");
    return i * 2 + 1;
}

} // namespace lotus_test

extern "C" int lotus_try_twice(int i)
{
    int caught = 0;
    try {
        lotus_test::may_throw(i, true);
    } catch (const std::runtime_error&) {
        caught = 1;
    }
    volatile int r = lotus_test::may_throw(i, false);
    (void)r;
    return caught;
}
