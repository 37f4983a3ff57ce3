#!/usr/bin/env python3
"""A detection-style DataLoader job (torchvision transforms v2, 0.16+): each item is an image and a target dict
with tv_tensors.BoundingBoxes, transformed jointly by one v2.Compose called with both (`transforms(img, target)`),
batched by a collate_fn function into tuples, as torchvision's detection references do. Ground truth: SAMPLE_LOG
gets `PID INDEX START_NS END_NS` around each pipeline call (CLOCK_MONOTONIC).
Usage: detection_job.py DATA SAMPLE_LOG [--workers N] [--batch-size B]"""
import argparse
import os
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2


class Detection(Dataset):
    def __init__(self, root, transforms, log):
        self.files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))
        self.transforms, self.log = transforms, log

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        img = Image.open(self.files[i]).convert("RGB")
        w, h = img.size
        boxes = tv_tensors.BoundingBoxes([[1, 1, w // 2, h // 2], [w // 4, h // 4, w - 1, h - 1]], format="XYXY",
                                         canvas_size=(h, w))
        target = {"boxes": boxes, "labels": torch.tensor([1, 2])}
        start = time.monotonic_ns()
        out = self.transforms(img, target)
        end = time.monotonic_ns()
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()} {i} {start} {end}\n")
        return out


def collate(batch):
    return tuple(zip(*batch))


OPS = ["ToImage", "RandomPhotometricDistort", "RandomZoomOut", "RandomHorizontalFlip", "SanitizeBoundingBoxes",
       "ToDtype"]

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("log")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0)
    tf = v2.Compose([v2.ToImage(), v2.RandomPhotometricDistort(p=1),
                     v2.RandomZoomOut(fill={tv_tensors.Image: (123, 117, 104), "others": 0}),
                     v2.RandomHorizontalFlip(p=1), v2.SanitizeBoundingBoxes(), v2.ToDtype(torch.float32, scale=True)])
    assert [type(t).__name__ for t in tf.transforms] == OPS
    loader = DataLoader(Detection(args.data, tf, args.log), batch_size=args.batch_size, num_workers=args.workers,
                        collate_fn=collate)
    n = 0
    for images, targets in loader:
        assert all(t["boxes"].shape[1] == 4 for t in targets)
        n += len(images)
    print(f"detection_job: {n} samples", flush=True)
