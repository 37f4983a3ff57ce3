#!/usr/bin/env python3
"""A text pipeline in a DataLoader without torchvision: each item's __getitem__ tokenizes its text with an object of
its own, then calls the user's own container class `Pipeline`, whose __call__ runs Truncate, MaskTokens and
ToTensor in turn (a Compose of its own, which no --pipeline names unless the tracer is told). --single: the
transform is one plain class (Lowercase) calling no other object. Usage: text_pipeline.py N [--single]"""
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from own_pipeline import Pipeline


class Tokenize:
    def __call__(self, text):
        return [ord(c) % 97 for c in text]


class Truncate:
    def __call__(self, ids):
        return ids[:24]


class MaskTokens:
    def __call__(self, ids):
        return [0 if i % 7 == 3 else t for i, t in enumerate(ids)]


class ToTensor:
    def __call__(self, ids):
        return torch.tensor(ids + [0] * (24 - len(ids)))


class Lowercase:
    def __call__(self, ids):
        return torch.tensor([t % 26 for t in ids] + [0] * (40 - len(ids)))


class Texts(Dataset):
    def __init__(self, n, transform):
        self.n, self.tokenize, self.transform = n, Tokenize(), transform

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.transform(self.tokenize(f"sample number {i} of the text pipeline"))


if __name__ == "__main__":
    n = int(sys.argv[1])
    tf = Lowercase() if "--single" in sys.argv else Pipeline([Truncate(), MaskTokens(), ToTensor()])
    loader = DataLoader(Texts(n, tf), batch_size=8, num_workers=2)
    print(sum(len(b) for b in loader), "samples", flush=True)
