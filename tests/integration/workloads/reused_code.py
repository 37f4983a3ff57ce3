"""Code objects freed and their addresses reused: each round makes a function `other` (a new code object), calls
it, frees it, then makes a new code object for `nest` and calls nest DEPTH deep. Prints how many calls of nest
it made and in how many rounds nest's code object took the address `other`'s had (the ground truth)."""
import sys
import types

rounds, depth = int(sys.argv[1]), int(sys.argv[2])
calls = reused = 0


def count():
    global calls
    calls += 1


def nest(n):
    count()
    return 0 if n == 0 else 1 + nest(n - 1)


def other(n):
    return n


NEST, OTHER = nest.__code__, other.__code__
for _ in range(rounds):
    f = types.FunctionType(OTHER.replace(co_firstlineno=OTHER.co_firstlineno), globals())
    f(1)
    before = id(f.__code__)
    del f
    code = NEST.replace(co_firstlineno=NEST.co_firstlineno)
    reused += id(code) == before
    globals()["nest"] = types.FunctionType(code, globals())
    nest(depth)
print(f"reused_code: {calls} calls of nest, {reused} rounds reused the address", flush=True)
