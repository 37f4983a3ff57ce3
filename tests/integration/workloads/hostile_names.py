#!/usr/bin/env python3
"""A test workload whose names are hostile to a terminal: a transform class made with type() whose name holds an
OSC that retitles the window (ESC ] 0 ; x BEL) and a C1 CSI (U+009B), and an ImageFolder under a directory whose
name holds ESC, BEL and a newline (images copied from DATA). It prints none of them: in launch mode its stdout is
the tracer's.
Usage: hostile_names.py DATA ROOT [SECONDS [TAG]]: SECONDS of sleep after the epoch (top draws a frame with its
rows); TAG is not used (a sweep's --param value)"""
import os
import shutil
import sys
import time

from torch.utils.data import DataLoader
from torchvision import datasets, transforms

CLASS_NAME = "Evil\x1b]0;x\x07\u009b31mCrop"
DIR_NAME = "data\x1b[2J\x07\nset"


def crop(self, img):
    return img.crop((0, 0, 32, 32))


def main():
    data, root = sys.argv[1], sys.argv[2]
    folder = os.path.join(root, DIR_NAME, "class_a")
    os.makedirs(folder, exist_ok=True)
    src = next(os.path.join(data, d) for d in sorted(os.listdir(data)) if os.path.isdir(os.path.join(data, d)))
    for i, name in enumerate(sorted(os.listdir(src))[:16]):
        shutil.copy(os.path.join(src, name), os.path.join(folder, f"img_{i}.jpg"))
    evil = type(CLASS_NAME, (), {"__call__": crop})
    ds = datasets.ImageFolder(os.path.join(root, DIR_NAME), transform=transforms.Compose([evil(), transforms.ToTensor()]))
    for batch in DataLoader(ds, batch_size=4, num_workers=2):
        pass
    time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0)


if __name__ == "__main__":
    main()
