#!/usr/bin/env python3
"""No arrow up. docs/how-it-works.md's line "Layers, from the bottom: ..." names every folder of userspace/ once,
and a folder's files include only folders before it there; inside cli/ and capture/ no include cycle joins two
modules (a file's stem: x.h with x.cpp; the live session's files are the parts of one class, Session, and count
as one). Prints each breach and exits 1."""
import collections
import os
import re
import sys

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ROOT = os.path.join(SOURCE, "userspace")
CHECKED_INSIDE = ("cli", "capture")
ONE_MODULE = {"cli/" + m: "cli/session" for m in ("live_session", "run_facts", "session_stages", "session_sweeps")}
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def module(path):
    rel = os.path.relpath(path, ROOT)
    folder, name = os.path.split(rel)
    m = folder + "/" + name.split(".")[0]
    return ONE_MODULE.get(m, m)


def include_graph():
    graph = collections.defaultdict(set)
    for folder, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith((".h", ".cpp", ".def")):
                continue
            path = os.path.join(folder, f)
            with open(path, errors="replace") as src:
                for line in src:
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    for candidate in (os.path.join(folder, m.group(1)), os.path.join(ROOT, m.group(1))):
                        if os.path.exists(candidate):
                            if module(candidate) != module(path):
                                graph[module(path)].add(module(candidate))
                            break
    return graph


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan's, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in list(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def documented_layers():
    with open(os.path.join(SOURCE, "docs", "how-it-works.md")) as f:
        text = " ".join(f.read().split())
    m = re.search(r"Layers, from the bottom: ([a-z, ]+)\.", text)
    return [x.strip() for x in m.group(1).split(",")] if m else []


def main():
    graph = include_graph()
    layers = documented_layers()
    folders = sorted(d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)))
    bad = []
    if sorted(layers) != folders:
        bad.append(f"docs/how-it-works.md's layers ({', '.join(layers)}) are not the folders of userspace/ "
                   f"({', '.join(folders)}), each once")
    rank = {name: i for i, name in enumerate(layers)}
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            fa, fb = a.split("/")[0], b.split("/")[0]
            if fa != fb and rank.get(fb, -1) > rank.get(fa, -1):
                bad.append(f"{a} includes {b}: {fb}/ is not below {fa}/ in the layers")
    for inside in CHECKED_INSIDE:
        sub = {a: {b for b in t if b.startswith(inside + "/")} for a, t in graph.items() if a.startswith(inside + "/")}
        bad += [f"an include cycle in {inside}/: {' <-> '.join(c)}" for c in cycles(collections.defaultdict(set, sub))]
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
