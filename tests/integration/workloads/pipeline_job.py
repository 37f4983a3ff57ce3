#!/usr/bin/env python3
"""A test workload: a torchvision ImageFolder pipeline in a DataLoader, with in-process ground truth that the
tracer's output is checked against. Options:
  --sample-log F   one line per sample when its __getitem__ finishes: "PID INDEX MONOTONIC_NS"
  --timed-log F    run the transforms through TimedCompose (a Compose subclass) that times each op with
                   perf_counter_ns: "PID INDEX OPNAME NS" per op (trace it with --pipeline TimedCompose)
  --hold F         after workers started, wait for file F before consuming batches
  --ready F        write F when the workers have prefetched (as many samples logged as prefetched)
  --gate F         before and after each iter() of a pass but the first (the train loader's passes are 0, 2...,
                   --val's 1, 3...), append "iterN" / "madeN" to F.at and wait for the file F.iterN / F.madeN
  --pin-thread     with --pin-memory on a machine without an accelerator: torch's own pin-memory thread all the same
                   (it relays each batch from the workers' result queue to the training loop), pinning nothing
  --no-in-order    DataLoader(in_order=False) (torch 2.6+), samples in order, worker 0 slower by 6 ms a sample: the
                   loop gets later batches first; --wait-log then names each batch by the indices in it
"""
import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

SAMPLE_LOG = None
TIMED_LOG = None
SLOW_S = [0.0]        # set per worker: seconds each sample of this worker takes longer


def start_pin_thread():
    """torch starts its pin-memory thread only where an accelerator (torch 1.x: CUDA) is: say there is one (of no
    known type), and let the thread's pinning hand each batch over unchanged. The thread, its queues and next() are
    torch's own."""
    import torch.utils.data._utils.pin_memory as pin
    if hasattr(torch, "accelerator"):
        torch.accelerator.is_available = lambda: True
        torch.accelerator.current_accelerator = lambda: None
        torch.accelerator.current_device_index = lambda: 0
        torch.accelerator.set_device_index = lambda index: None
    else:
        torch.cuda.is_available = lambda: True
        torch.cuda.current_device = lambda: 0
        torch.cuda.set_device = lambda device: None
    pin.pin_memory = lambda data, device=None: data


def name_thread(name, log):
    """prctl(PR_SET_NAME): the calling thread's name as the kernel keeps it (comm); logged as PID TID NAME."""
    import ctypes
    import threading
    if ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name.encode()), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NAME)")
    _append(log, f"{os.getpid()} {threading.get_native_id()} {name}\n")


class NameWorker:
    """worker_init_fn: names each worker's main thread lotus-w<id>."""
    def __init__(self, log):
        self.log = log

    def __call__(self, worker_id):
        name_thread(f"lotus-w{worker_id}", self.log)


class LoggedPut:
    """worker_init_fn: logs when each of the worker's data_queue.put calls returns, i.e. when a batch has been
    handed over (a worker's k-th line is its k-th batch): PID MONOTONIC_NS BATCH_INDEX."""
    def __init__(self, log):
        self.log = log

    def __call__(self, worker_id):
        import multiprocessing.queues
        put, log = multiprocessing.queues.Queue.put, self.log

        def logged_put(queue, obj, *args, **kwargs):
            put(queue, obj, *args, **kwargs)
            idx = obj[0] if isinstance(obj, tuple) and obj and isinstance(obj[0], int) else -1
            _append(log, f"{os.getpid()} {time.monotonic_ns()} {idx}\n")
        multiprocessing.queues.Queue.put = logged_put


class SlowWorkerZero:
    """worker_init_fn: worker 0's samples take 6 ms longer each."""
    def __call__(self, worker_id):
        SLOW_S[0] = 0.006 if worker_id == 0 else 0.0


class WorkerInit:
    """worker_init_fn: several in turn."""
    def __init__(self, *fns):
        self.fns = fns

    def __call__(self, worker_id):
        for fn in self.fns:
            fn(worker_id)


def _append(path, line):
    # O_APPEND writes of one short line are atomic across the worker processes.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class TimedCompose(transforms.Compose):
    def __call__(self, img):
        lines = []
        for t in self.transforms:
            t0 = time.perf_counter_ns()
            img = t(img)
            t1 = time.perf_counter_ns()
            lines.append(f"{os.getpid()} {CURRENT_INDEX[0]} {type(t).__name__} {t1 - t0}\n")
        _append(TIMED_LOG, "".join(lines))
        return img


CURRENT_INDEX = [-1]


class Offset:
    def __call__(self, label):
        return label + 1


class LabelTensor:
    def __call__(self, label):
        return torch.tensor(label)


class Relabel:
    def __call__(self, label):
        return label - 1


class BatchScale:
    """--batch-transform: a transform the training loop runs on each batch (in a Compose, so a pipeline there),
    logging the monotonic ns of each call's start."""
    def __init__(self, log):
        self.log = log

    def __call__(self, x):
        _append(self.log, f"{time.monotonic_ns()}\n")
        return x * 2


class TwoViews:
    """Two augmented views of each image (contrastive learning's TwoCropsTransform): the same pipeline twice."""
    def __init__(self, pipeline):
        self.pipeline = pipeline

    def __call__(self, img):
        return [self.pipeline(img), self.pipeline(img)]


class Flaky:
    """Raises at every 5th call in its process (an image the pipeline cannot take)."""
    calls = 0

    def __call__(self, img):
        Flaky.calls += 1
        if Flaky.calls % 5 == 0:
            raise ValueError("flaky")
        return img


class LoggedFolder(datasets.ImageFolder):
    index_labels = False  # --no-in-order: a sample's label is its dataset index (an attribute: spawned workers
                          # unpickle the dataset, they do not run main())
    relabel = None        # --target-transform: an object of its own called after super().__getitem__

    def __getitem__(self, index):
        CURRENT_INDEX[0] = index
        r = super().__getitem__(index)
        if self.relabel is not None:
            r = (r[0], self.relabel(r[1]))
        if SLOW_S[0]:
            time.sleep(SLOW_S[0])
        if self.index_labels:
            r = (r[0], index)
        if SAMPLE_LOG:
            _append(SAMPLE_LOG, f"{os.getpid()} {index} {time.monotonic_ns()}\n")
        return r


def read_and_decode(path):
    """torchvision.io's file read and JPEG decode (a module-level function: spawn and forkserver pickle it)."""
    import torchvision.io
    return torchvision.io.decode_jpeg(torchvision.io.read_file(path))


class LoggedCollate:
    """default_collate, logging when each batch's collation ends (a worker's k-th line is its k-th batch).
    convert: batch_size=None, where torch calls it with each sample: default_convert, as DataLoader's own."""

    def __init__(self, path, convert=False):
        self.path, self.convert = path, convert

    def __call__(self, batch):
        if self.convert:
            out = torch.utils.data.default_convert(batch)
            _append(self.path, f"{os.getpid()} 1 {time.monotonic_ns()}\n")
            return out
        out = torch.utils.data.default_collate(batch)
        _append(self.path, f"{os.getpid()} {len(batch)} {time.monotonic_ns()}\n")
        return out


class OwnCrop:
    def __call__(self, img):
        return img.crop((0, 0, 112, 112))


class OwnToTensor:
    def __call__(self, img):
        import numpy as np
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255


class OwnFolder(torch.utils.data.Dataset):
    """Not torchvision's: its own file list, decoding and transform classes, called directly."""

    def __init__(self, root):
        self.paths = sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith(".jpg"))
        self.crop, self.to_tensor = OwnCrop(), OwnToTensor()

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image
        with open(self.paths[i], "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.to_tensor(self.crop(img)), 0


class RetryFolder(LoggedFolder):
    """--flaky: an item whose pipeline raised is replaced by item 0 (super().__getitem__(0)); logs PID INDEX
    RETRIES per item to --retry-log."""
    retry_log = None

    def __getitem__(self, index):
        retries = 0
        while True:
            try:
                r = super().__getitem__(index if not retries else 0)
                break
            except ValueError:
                retries += 1
        _append(self.retry_log, f"{os.getpid()} {index} {retries}\n")
        return r


class Numbers(torch.utils.data.IterableDataset):
    """An IterableDataset, split between workers, with a plain function as its 'transform'."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        workers, wid = (info.num_workers, info.id) if info else (1, 0)
        for i in self.share(wid, workers):
            yield torch.full((3, 64, 64), float(i)), i % 4

    def share(self, wid, workers):
        return range(wid, self.n, workers)


class UnevenNumbers(Numbers):
    """Worker 0 has 3/4 of the items: the others' data runs out first, and next() skips the tasks they had left."""

    def share(self, wid, workers):
        cut = 3 * self.n // 4 if workers > 1 else self.n
        return range(0, cut) if wid == 0 else range(cut + wid - 1, self.n, workers - 1)


def main():
    global SAMPLE_LOG, TIMED_LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--no-batching", action="store_true",
                    help="DataLoader(batch_size=None): each task and each 'batch' is one sample, not collated")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--sample-log")
    ap.add_argument("--timed-log")
    ap.add_argument("--hold")
    ap.add_argument("--ready")
    ap.add_argument("--gate")
    ap.add_argument("--persistent", action="store_true")
    ap.add_argument("--context", choices=["fork", "spawn", "forkserver"])
    ap.add_argument("--wait-log", help="one line per batch: EPOCH INDEX NS spent in next(it), MONOTONIC_NS it began")
    ap.add_argument("--pause-after", type=int, help="with --hold F: after this many batches of the first epoch, "
                    "wait for the workers to finish the batches handed to them, write F.paused and wait for F")
    ap.add_argument("--val", action="store_true", help="after each epoch, a pass over a second DataLoader")
    ap.add_argument("--val-workers", type=int, help="the --val loader's workers (default: --workers)")
    ap.add_argument("--batch-transform", help="the loop runs Compose([BatchScale]) on each training batch, logging "
                                              "each call's start here (MONOTONIC_NS)")
    ap.add_argument("--val-same-sampler", action="store_true",
                    help="with --val: the second DataLoader over the first one's dataset with its batch_sampler too "
                         "(the two cannot be told apart by what they hold)")
    ap.add_argument("--val-same-dataset", action="store_true",
                    help="with --val: the second DataLoader over the first one's own dataset object (batches of "
                         "twice the size, no shuffling: only its sampler tells it apart)")
    ap.add_argument("--iterable", action="store_true", help="an IterableDataset without Compose instead")
    ap.add_argument("--uneven", action="store_true",
                    help="with --iterable: worker 0 has 3/4 of the items; --wait-log names each batch by the "
                         "iterator's own count (its _rcvd_idx after next())")
    ap.add_argument("--own-dataset", action="store_true",
                    help="a map-style dataset of its own (own __getitem__ and transform classes, no Compose)")
    ap.add_argument("--v2", action="store_true", help="torchvision.transforms.v2 (torchvision >= 0.16)")
    ap.add_argument("--decode", choices=["pil", "tensor"], default="pil",
                    help="tensor: read and decode with torchvision.io (v2 only)")
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--pin-thread", action="store_true", help="torch's pin-memory thread without an accelerator")
    ap.add_argument("--no-in-order", action="store_true", help="DataLoader(in_order=False), see above")
    ap.add_argument("--step-ms", type=float, default=0,
                    help="a training step: sleep this long before each next(), 10 times as long before an epoch's first")
    ap.add_argument("--target-transform", action="store_true",
                    help="a second pipeline per item, target_transform=Compose([Offset(), LabelTensor()]), and "
                         "__getitem__ calling an object of its own (Relabel) after it: every op one item's")
    ap.add_argument("--two-views", action="store_true",
                    help="transform=TwoViews(pipeline): each item runs the same pipeline twice")
    ap.add_argument("--break-after", type=int,
                    help="leave every other epoch (the first, third...) after this many batches")
    ap.add_argument("--flaky", help="a transform that raises at every 5th call, the item then retried as item 0; "
                                    "one line per item to this log: PID INDEX RETRIES")
    ap.add_argument("--containers", action="store_true",
                    help="container transforms: RandomApply([ColorJitter], p=1) and a nested Compose([Grayscale(3)])")
    ap.add_argument("--collate-log", help="one line per batch when its collation ends: PID BATCH_SIZE MONOTONIC_NS")
    ap.add_argument("--put-log", help="one line per batch when the worker's data_queue.put returns: PID MONOTONIC_NS")
    ap.add_argument("--thread-log", help="name the main thread lotus-main and each worker's lotus-w<id> (prctl); "
                                         "one line per naming: PID TID NAME")
    args = ap.parse_args()
    SAMPLE_LOG, TIMED_LOG = args.sample_log, args.timed_log
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if args.v2:
        from torchvision.transforms import v2
        ops = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
               v2.ToDtype(torch.float32, scale=True),
               v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])]
        if args.decode == "tensor":  # already an image tensor: ToImage has nothing to convert, but still runs
            ops = [v2.ToImage()] + [op for op in ops if not isinstance(op, v2.ToImage)]
        tf = v2.Compose(ops)
    else:
        ops = [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
        tf = TimedCompose(ops) if TIMED_LOG else transforms.Compose(ops)
    if args.containers:  # p=1: every sample runs ColorJitter; the nested Compose always runs
        T = v2 if args.v2 else transforms
        tf = T.Compose([T.RandomApply([T.ColorJitter(brightness=0.4)], p=1.0), T.Compose([T.Grayscale(3)]),
                        *tf.transforms])
    if args.flaky:
        tf.transforms.insert(1, Flaky())
    if args.two_views:
        tf = TwoViews(tf)
    extra_ds = {"loader": read_and_decode} if args.decode == "tensor" else {}
    if args.target_transform:
        extra_ds["target_transform"] = transforms.Compose([Offset(), LabelTensor()])
    ds = (RetryFolder if args.flaky else LoggedFolder)(args.data, transform=tf, **extra_ds)
    ds.retry_log = args.flaky
    if args.target_transform:
        ds.relabel = Relabel()
    extra = {}
    if args.workers and args.persistent:
        extra["persistent_workers"] = True
    if args.workers and args.context:
        extra["multiprocessing_context"] = args.context
    if args.pin_memory:
        extra["pin_memory"] = True
    if args.pin_thread:
        start_pin_thread()
    if args.collate_log:
        extra["collate_fn"] = LoggedCollate(args.collate_log, convert=args.no_batching)
    init = []
    if args.thread_log:
        name_thread("lotus-main", args.thread_log)
        init.append(NameWorker(args.thread_log))
    if args.put_log:
        init.append(LoggedPut(args.put_log))
    if args.no_in_order:
        extra["in_order"] = False
        ds.index_labels = True
        init.append(SlowWorkerZero())
    if args.workers and init:
        extra["worker_init_fn"] = WorkerInit(*init)
    loader = DataLoader(ds, batch_size=None if args.no_batching else args.batch_size, shuffle=not args.no_in_order,
                        num_workers=args.workers, **extra)
    if args.own_dataset:
        ds = OwnFolder(args.data)
        loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, **extra)
    if args.iterable:
        ds = (UnevenNumbers if args.uneven else Numbers)(len(ds))
        loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers, **extra)
    val = None
    if args.val:
        val_workers = args.workers if args.val_workers is None else args.val_workers
        if not val_workers:  # (options only loaders with workers take)
            extra = {k: v for k, v in extra.items()
                     if k not in ("persistent_workers", "multiprocessing_context", "worker_init_fn")}
        val_ds = datasets.ImageFolder(args.data, transform=transforms.Compose([
            transforms.Resize(128), transforms.CenterCrop(112), transforms.ToTensor()]))
        if args.val_same_sampler:
            val = DataLoader(ds, batch_sampler=loader.batch_sampler, num_workers=val_workers, **extra)
        else:
            val = DataLoader(ds if args.val_same_dataset else val_ds, batch_size=2 * args.batch_size,
                             num_workers=val_workers, **extra)
    on_batch = transforms.Compose([BatchScale(args.batch_transform)]) if args.batch_transform else None
    print(f"pipeline_job: pid {os.getpid()}", flush=True)
    for epoch in range(args.epochs):
        it = _gated_iter(loader, args.gate, 2 * epoch)
        if args.hold and epoch == 0 and args.pause_after is None:
            prefetched = min(len(ds), 2 * max(args.workers, 1) * args.batch_size)
            while args.sample_log and args.workers and _count(args.sample_log) < prefetched:
                time.sleep(0.01)
            time.sleep(0.2)  # let the workers go idle on their queues
            if args.ready:
                _append(args.ready, "ready\n")
            while not os.path.exists(args.hold):
                time.sleep(0.01)
        n = 0
        waits = []
        while True:
            if args.pause_after is not None and epoch == 0 and len(waits) == args.pause_after:
                _workers_idle(it)
                _append(args.hold + ".paused", "paused\n")
                while not os.path.exists(args.hold):
                    time.sleep(0.01)
            if args.step_ms:  # before the epoch's first batch 10 steps: the workers get ahead of the loop
                time.sleep(args.step_ms / 1000 * (1 if waits else 10))
            began = time.monotonic_ns()
            t0 = time.perf_counter_ns()
            try:
                x, y = next(it)
            except StopIteration:
                break
            b = int(y[0]) // args.batch_size if args.no_in_order else it._rcvd_idx - 1 if args.uneven else None
            waits.append((time.perf_counter_ns() - t0, began, b))
            if on_batch is not None:
                x = on_batch(x)
            n += 1 if args.no_batching else len(y)
            # Free this batch now: rebinding x to the next batch would free it inside the next timing.
            del x, y
            if args.break_after is not None and epoch % 2 == 0 and len(waits) == args.break_after:
                break
        if args.wait_log:
            _append(args.wait_log, "".join(f"{epoch} {i if b is None else b} {w} {began}\n"
                                           for i, (w, began, b) in enumerate(waits)))
        print(f"pipeline_job: epoch {epoch}: {n} samples", flush=True)
        if val is not None:
            for x, y in _gated_iter(val, args.gate, 2 * epoch + 1):
                pass
    return 0


def _gated_iter(loader, gate, n):
    """iter(loader) for the job's pass n, waiting at --gate's files before and after it (pass 0 is not gated)."""
    if gate and n:
        _gate(gate, f"iter{n}")
    it = iter(loader)
    if gate and n:
        _gate(gate, f"made{n}")
    return it


def _gate(gate, name):
    _append(gate + ".at", name + "\n")
    while not os.path.exists(f"{gate}.{name}"):
        time.sleep(0.01)


def _workers_idle(it, timeout_s=10.0):
    """Waits until the workers have finished every batch they were handed (each result waits in the iterator's
    queue), so that none is mid-batch when a tracer attaches: a batch begun before the attach has no batch span."""
    q = getattr(it, "_data_queue", None)
    deadline = time.monotonic() + timeout_s
    while q is not None and time.monotonic() < deadline:
        try:
            if q.qsize() >= it._tasks_outstanding:
                return
        except (NotImplementedError, AttributeError):
            return
        time.sleep(0.01)


def _count(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
