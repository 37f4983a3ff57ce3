#!/usr/bin/env python3
"""Writes a small deterministic ImageFolder of JPEGs: ROOT/class_K/img_NNNNN.jpg.

Every byte depends only on the arguments (seeded RNG), so runs and tests are repeatable."""
import argparse
import os
import random

from PIL import Image, ImageDraw


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--size", default="320x240", help="WIDTHxHEIGHT")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    rng = random.Random(args.seed)
    marker = os.path.join(args.root, ".complete")
    stamp = f"{args.images} {args.classes} {w}x{h} {args.seed}"
    if os.path.exists(marker) and open(marker).read() == stamp:
        return
    for i in range(args.images):
        cls = f"class_{i % args.classes}"
        os.makedirs(os.path.join(args.root, cls), exist_ok=True)
        img = Image.new("RGB", (w, h), tuple(rng.randrange(256) for _ in range(3)))
        draw = ImageDraw.Draw(img)
        for _ in range(12):
            x0, y0 = rng.randrange(w), rng.randrange(h)
            x1, y1 = x0 + rng.randrange(10, w // 2), y0 + rng.randrange(10, h // 2)
            draw.ellipse((x0, y0, x1, y1), fill=tuple(rng.randrange(256) for _ in range(3)))
        img.save(os.path.join(args.root, cls, f"img_{i:05d}.jpg"), quality=90)
    with open(marker, "w") as f:
        f.write(stamp)


if __name__ == "__main__":
    main()
