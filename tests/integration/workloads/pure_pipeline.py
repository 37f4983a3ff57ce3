#!/usr/bin/env python3
"""A pure-Python pipeline (no torch): a Compose-like class of transform classes, run N times in the main
process and N/2 times in each of two multiprocessing workers. Imports before it free code objects whose
addresses get reused, which a tracer must not confuse with the new ones."""
import multiprocessing as mp
import sys


class Scale:
    def __call__(self, x):
        return [v * 2 for v in x]


class Shift:
    def __call__(self, x):
        return [v + 1 for v in x]


class Pipeline:
    def __init__(self, ops):
        self.ops = ops

    def __call__(self, x):
        for op in self.ops:
            x = op(x)
        return x


class Items:
    def __init__(self):
        self.p = Pipeline([Scale(), Shift()])

    def __getitem__(self, i):
        return self.p(list(range(i % 50)))


def work(r):
    d = Items()
    return len([d[i] for i in r])


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    d = Items()
    for i in range(n):
        d[i]
    with mp.get_context("fork").Pool(2) as pool:
        assert sum(pool.map(work, [range(0, n // 2), range(n // 2, n)])) == n
