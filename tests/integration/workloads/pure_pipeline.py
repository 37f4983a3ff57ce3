#!/usr/bin/env python3
"""A pure-Python pipeline (no torch): a Compose-like class of three transform classes, run N times in the main
process and N/2 times in each of two multiprocessing worker processes. Imports before it free code objects
whose addresses get reused, which a tracer must not confuse with the new ones. --loop SECONDS: print 'ready', then run the
pipeline in the main process for that long (attach tests). --plain (first): two ops and no generator expression,
the pipeline bench/run.py measures (its figures stay comparable). --types (first): print the address and name of
each class the pipeline's frames have as self (the cell type too), as `type 0x... NAME` lines, then run the
pipeline N times in one forked child."""
import multiprocessing as mp
import sys


class Scale:
    def __call__(self, x):
        return [v * 2 for v in x]


class Shift:
    def __call__(self, x):
        return [v + 1 for v in x]


class Clip:
    """Uses self in a lambda, a comprehension and a generator expression: CPython 3.10 moves self into a cell
    before the call runs (localsplus[0] is then empty), 3.11+ once it runs."""

    def __init__(self):
        self.lo, self.hi = 0, 90

    def __call__(self, x):
        clip = lambda v: min(max(v, self.lo), self.hi)
        assert all(v >= self.lo - 1000 for v in x)
        return [clip(v) for v in x]


class Pipeline:
    def __init__(self, ops, check=True):
        self.ops = ops
        self.check = check

    def __call__(self, x):
        for op in self.ops:
            x = op(x)
        if self.check:
            assert all(op is not self for op in self.ops)  # self in a generator expression (a cell, as above)
        return x


class Items:
    def __init__(self, plain=False):
        self.p = Pipeline([Scale(), Shift()], check=False) if plain else Pipeline([Scale(), Shift(), Clip()])

    def __getitem__(self, i):
        return self.p(list(range(i % 50)))


def work(r, plain):
    d = Items(plain)
    assert len([d[i] for i in r]) == len(r)


if __name__ == "__main__":
    plain = len(sys.argv) > 1 and sys.argv[1] == "--plain"
    if plain:
        del sys.argv[1]
    if len(sys.argv) > 1 and sys.argv[1] == "--types":
        del sys.argv[1]
        import types
        for cls in (Scale, Shift, Clip, Pipeline, Items):
            print(f"type {id(cls):#x} {cls.__name__}", flush=True)
        # not types.CellType.__name__: reading the static type's tp_name would bring in the very page whose absence
        # from the process the test is about
        print(f"type {id(types.CellType):#x} cell", flush=True)
        import os
        pid = os.fork()  # as a DataLoader worker: the child's page tables start without the binary's read-only data
        if pid == 0:
            d = Items()
            for i in range(int(sys.argv[1])):
                d[i]
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        import time
        time.sleep(1)  # alive, as a worker's parent is: where the tracer reads what the exited child described
        sys.exit(0)
    if len(sys.argv) > 2 and sys.argv[1] == "--loop":
        import time
        d = Items()
        print("ready", flush=True)
        end = time.time() + float(sys.argv[2])
        while time.time() < end:
            for i in range(100):
                d[i]
            time.sleep(0.001)
        sys.exit(0)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    d = Items(plain)
    for i in range(n):
        d[i]
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=work, args=(r, plain)) for r in (range(0, n // 2), range(n // 2, n))]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
