#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a cycle.

For each crate named on the command line (its `src` directory), every `.rs` file is a module
(`foo.rs` and `foo/mod.rs` are `foo`, `lib.rs` and `main.rs` the crate root); a module depends
on another when its text (test modules left out) names it through `crate::`, `super::` or
`self::` paths, `use` groups included. Edges between a module and its own ancestors or
descendants are not counted (a parent declaring its children is not an import). Strongly
connected components of more than one module are cycles: printed, and the exit status is 1.
`cargo modules dependencies` draws the same graph from rust-analyzer; this check needs nothing
but Python, so CI runs it on every change.
"""
import os
import re
import sys


def module_files(src):
    """Module path (a tuple of names) -> source text, for every .rs file under `src`."""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                text = fh.read()
            # Test modules may use anything of their parent's.
            text = re.split(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+\w+\s*\{", text)[0]
            out[tuple(rel)] = text
    return out


PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")
GROUP = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", re.S)


def referenced(module, text):
    """Absolute module paths (prefixes of item paths) that `text`, in `module`, names."""
    found = []
    def resolve(anchor, rest):
        base = {"crate": (), "self": module}.get(anchor)
        if base is None:
            base = module[:-1]
        return base + tuple(p for p in rest.split("::") if p)
    for m in GROUP.finditer(text):
        head = resolve(m.group(1), m.group(2))
        for part in m.group(3).split(","):
            part = part.strip().split(" as ")[0].strip()
            name = part.split("::")[0].strip()
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or "") and name != "self":
                found.append(head + tuple(p for p in part.split("::") if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p)))
            else:
                found.append(head)
    for m in PATH.finditer(text):
        if m.group(2) == "::{":
            continue
        found.append(resolve(m.group(1), m.group(2)))
    return found


def cycles(src):
    mods = module_files(src)
    known = set(mods)
    edges = {m: set() for m in mods}
    for m, text in mods.items():
        for path in referenced(m, text):
            while path and path not in known:
                path = path[:-1]
            if path == m or path[: len(m)] == m or m[: len(path)] == path:
                continue
            edges[m].add(path)
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(100_000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            if len(comp) > 1:
                out.append(sorted("::".join(c) or "crate" for c in comp))

    for v in mods:
        if v not in index:
            visit(v)
    return len(mods), sum(len(e) for e in edges.values()), out


def main():
    failed = False
    for src in sys.argv[1:]:
        n, e, found = cycles(src)
        print(f"{src}: {n} modules, {e} imports between them, {len(found)} cycles")
        for c in found:
            print("  cycle: " + " -> ".join(c))
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
