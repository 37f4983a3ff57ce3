"""--all-calls test workload: Python-to-Python calls only (inlined by CPython 3.11+), nested, and some ending
in an exception. Per run of N: middle N, leaf N + (N - N//7 - 1) (boom's non-raising calls), boom N of which
N//7 + 1 raise. --loop SECONDS: keep calling for that long after printing 'ready' (attach tests)."""
import sys
import time


def leaf(x):
    return x + 1


def middle(x):
    return leaf(x) * 2


def boom(x):
    if x % 7 == 0:
        raise ValueError(x)
    return leaf(x)


def run(n):
    total = 0
    for i in range(n):
        total += middle(i)
        try:
            boom(i)
        except ValueError:
            pass
    return total


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--loop":
        print("ready", flush=True)
        end = time.time() + float(sys.argv[2])
        while time.time() < end:
            run(100)
            # One call into Python from C (as any for loop over a Python iterator, or a DataLoader, makes):
            # on 3.11 it is how --all-calls learns the thread's state when it attached to a running process.
            list(map(lambda x: x, [0]))
            time.sleep(0.01)
    else:
        run(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
