#!/usr/bin/env python3
"""A test workload with network traffic: a DataLoader whose workers send each sample's bytes over TCP to a server
thread of the training process, which answers each message with a 3-byte ack. Ground truth: every process logs
the bytes its sockets' send and recv calls returned, "PID sent|recv N" per call, and each worker its id, "PID worker
ID", to --net-log. Its workers call no Python object (the dataset's __getitem__ is inlined, the rest are functions
and C): no probed call walks their stacks for the worker id."""
import argparse
import os
import socket
import struct
import threading

import torch
from torch.utils.data import DataLoader, Dataset

LOG = None


def log(kind, n):
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{os.getpid()} {kind} {n}\n".encode())
    finally:
        os.close(fd)


def send_all(sock, data):
    while data:
        n = sock.send(data)
        log("sent", n)
        data = data[n:]


def recv_exactly(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        log("recv", len(chunk))
        out += chunk
    return out


def serve(listener):
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


def answer(conn):
    with conn:
        while True:
            head = recv_exactly(conn, 4)
            if head is None:
                return
            recv_exactly(conn, struct.unpack("!I", head)[0])
            send_all(conn, b"ack")


class Sending(Dataset):
    def __init__(self, n, port):
        self.n, self.port, self.sock = n, port, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sock is None:  # one connection per worker process
            self.sock = socket.create_connection(("127.0.0.1", self.port))
        payload = bytes(100 * (i + 1))
        send_all(self.sock, struct.pack("!I", len(payload)) + payload)
        recv_exactly(self.sock, 3)
        return torch.tensor([i])


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--net-log", required=True)
    args = ap.parse_args()
    LOG = args.net_log
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    loader = DataLoader(Sending(args.samples, listener.getsockname()[1]), batch_size=8, num_workers=args.workers,
                        worker_init_fn=lambda wid: log("worker", wid))
    n = sum(len(b) for b in loader)
    print(f"net_job: {n} samples", flush=True)


if __name__ == "__main__":
    main()
