#!/usr/bin/env python3
"""Finds import circles between the modules of one crate.

Usage: scripts/module_cycles.py crates/<name> [crates/<name> ...]

An edge A -> B is drawn when a file of module A names module B by a path: `crate::b::…` (in a
`use` or inline), or `super::b::…` / `super::Item` from a submodule (an item of the parent counts
as the parent module). `mod` declarations are not edges (a parent owning its children is not an
import). Test modules (`#[cfg(test)] mod tests`) are ignored: the file ends at that line.
Prints every strongly connected component of more than one module; exits 1 when there is one.
"""
import os
import re
import sys


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3]
    parts = rel.split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def known_modules(src):
    mods = set()
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                mods.add(module_of(src, os.path.join(root, f)))
    return mods


def longest_module(mods, parts):
    for n in range(len(parts), -1, -1):
        if tuple(parts[:n]) in mods:
            return tuple(parts[:n])
    return ()


def edges(src):
    mods = known_modules(src)
    graph = {m: set() for m in mods}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            me = module_of(src, path)
            text = open(path, encoding="utf-8").read()
            text = text.split("#[cfg(test)]")[0]
            code = "\n".join(line.split("//")[0] for line in text.splitlines())
            for m in re.finditer(r"\bcrate((?:::\w+)+)", code):
                target = longest_module(mods, m.group(1).strip(":").split("::"))
                if target != me and not (target == () and me == ()):
                    graph[me].add(target)
            for m in re.finditer(r"\b((?:super::)+)((?:\w+::)*\w+)", code):
                up = m.group(1).count("super::")
                base = list(me[: len(me) - up])
                target = longest_module(mods, base + m.group(2).split("::"))
                if target != me:
                    graph[me].add(target)
            # A grouped import `use crate::{a::X, b::Y}` names several modules.
            for m in re.finditer(r"\bcrate::\{([^}]*)\}", code):
                for item in m.group(1).split(","):
                    target = longest_module(mods, item.strip().split("::"))
                    if target != me:
                        graph[me].add(target)
    return graph


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def name(m):
    return "::".join(m) if m else "lib"


def main():
    bad = False
    for crate in sys.argv[1:]:
        src = os.path.join(crate, "src")
        graph = edges(src)
        cycles = sccs(graph)
        n_edges = sum(len(v) for v in graph.values())
        print(f"{crate}: {len(graph)} modules, {n_edges} edges, {len(cycles)} circles")
        for c in cycles:
            bad = True
            print("  circle:", " <-> ".join(sorted(name(m) for m in c)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
