#!/usr/bin/env python3
"""Bench-only: the bundled example run under torch.profiler (CPU activities), the field's reference for the
cost of in-process tracing. Same arguments as examples/train.py."""
import os
import runpy
import sys

from torch.profiler import ProfilerActivity, profile

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "train.py")

if __name__ == "__main__":
    sys.argv = [TRAIN] + sys.argv[1:]
    with profile(activities=[ProfilerActivity.CPU]):
        try:
            runpy.run_path(TRAIN, run_name="__main__")
        except SystemExit:
            pass
