"""Recursion deeper than the BPF programs follow (64 nested seen calls): `nest` called 101 deep, RUNS times.
Prints how many calls of nest it made (the ground truth), counted in the process."""
import sys

calls = 0


def nest(n):
    global calls
    calls += 1
    return 0 if n == 0 else 1 + nest(n - 1)


for _ in range(int(sys.argv[1])):
    nest(100)
print(f"deep_calls: {calls} calls of nest", flush=True)
