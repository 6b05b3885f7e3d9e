#!/usr/bin/env python3
"""The scheduler crate's module graph: which top-level module (`actor`, `workers`, `messages`…)
refers to which through `crate::…` paths, and whether that graph has a cycle.

Usage: python3 crates/scheduler/tools/module_graph.py [src dir]   (exit status 1 on a cycle)

Why a script: rustc forbids cycles between crates, not between modules, and the old
`actor.rs ↔ worker.rs` circle grew unnoticed. Child modules using `super::` stay inside their
parent, so only `crate::` paths can cross between top-level modules. `lib.rs` (the crate root:
the `Scheduler` handle) is left out: it wires every stage and nothing may import it.
"""
import os, re, sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
edges = {}
for dirpath, _, files in os.walk(src):
    for f in files:
        if not f.endswith(".rs"):
            continue
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, src)
        if rel == "lib.rs":
            continue
        top = rel.split(os.sep)[0].removesuffix(".rs")
        text = open(path, encoding="utf-8").read()
        # `use crate::{a, b::c}` groups as well as plain paths.
        refs = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
        for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
            refs.update(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
        for r in refs:
            if r != top:
                edges.setdefault(top, set()).add(r)

for m in sorted(edges):
    print(f"{m} -> {', '.join(sorted(edges[m]))}")

state, stack = {}, []
def visit(n):
    state[n] = 1
    stack.append(n)
    for m in sorted(edges.get(n, ())):
        if state.get(m) == 1:
            print("cycle:", " -> ".join(stack[stack.index(m):] + [m]))
            sys.exit(1)
        if m not in state:
            visit(m)
    stack.pop()
    state[n] = 2
for n in sorted(edges):
    if n not in state:
        visit(n)
print("no cycle")
