#!/usr/bin/env python3
"""A test workload whose names are not ASCII: an ImageFolder under a non-ASCII directory, with non-ASCII file
names (copied from DATA), and two transforms whose class names are a Latin-1 and a CJK identifier (CPython keeps
them as 1- and 2-byte compact strings). Prints each file path it loads, as ground truth.
Usage: unicode_job.py DATA ROOT"""
import os
import shutil
import sys

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


class Recadré:
    def __call__(self, img):
        return img.crop((0, 0, 32, 32))


class 変換:
    def __call__(self, img):
        return img.transpose(0)


def main():
    data, root = sys.argv[1], sys.argv[2]
    folder = os.path.join(root, "café", "classe_ü")
    os.makedirs(folder, exist_ok=True)
    src = next(os.path.join(data, d) for d in sorted(os.listdir(data)) if os.path.isdir(os.path.join(data, d)))
    for i, name in enumerate(sorted(os.listdir(src))[:16]):
        shutil.copy(os.path.join(src, name), os.path.join(folder, f"img_{i}_ü日.jpg"))
    ds = datasets.ImageFolder(os.path.join(root, "café"),
                              transform=transforms.Compose([Recadré(), 変換(), transforms.ToTensor()]))
    for batch in DataLoader(ds, batch_size=4, num_workers=2):
        pass
    for path, _ in ds.samples:
        print("loaded", path)


if __name__ == "__main__":
    main()
