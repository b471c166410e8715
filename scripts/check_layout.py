#!/usr/bin/env python3
"""The layout is the architecture: checks, from the code's own includes, that

  1. every source file belongs to a known component (folder) of a known layer;
  2. no component includes a component of a higher layer (each layer depends only on layers
     below it; within the ops layer, every op folder (ops/<op>, found on disk: a new op needs no
     line here) may use ops/common and other ops -- the ones it is built from; no two ops may use
     each other (the cycle check) and ops/common uses no op);
  3. the components' include graph has no cycle;
  4. no source file is longer than MAX_LINES lines.

Run by ctest (layout_check) in CI. Usage: scripts/check_layout.py [--report] [repo root].
--report prints the component graph and the counts as well; docs/DESIGN-NOTES.md quotes it.
"""
import os
import re
import sys

MAX_LINES = 600
SOURCE_EXT = (".hpp", ".cuh", ".h", ".cpp", ".cu")

# Layers, lowest first. A component may include its own layer and the layers below it.
LAYERS = [
    ("core", ["core"]),
    ("primitives", ["primitives"]),
    ("mapping", ["mapping"]),
    ("runtime", ["runtime", "torchrun"]),  # torchrun: the runtime's store plugin (dlopen), no TileLink includes
    ("comm", ["comm"]),
    ("executor", ["executor"]),
    ("ops", ["ops/*"]),  # ops/common and one folder per op
    ("sim", ["sim"]),
    ("tune", ["tune"]),
    ("testing", ["testing"]),
    ("bench", ["bench"]),
    ("tools", ["tools"]),
    ("tests", ["tests/cpu", "tests/gpu", "tests/process", "tests/fuzz", "tests/downstream", "tests/cli", "tests/torchrun"]),
]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def component_of(rel):
    """The component of a repository-relative path, or None for files outside the source tree."""
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "tilelink":
        inner = parts[2:]
    elif parts[0] == "src":
        inner = parts[1:]
    elif parts[0] == "bench":
        return "bench"
    elif parts[0] == "tests" and len(parts) > 2:
        return "tests/" + parts[1]
    elif parts[0] == "testing":
        return "testing"
    else:
        return None
    if len(inner) < 2:
        return "tilelink.hpp" if inner == ["tilelink.hpp"] else None
    if inner[0] == "ops" and len(inner) > 2:
        return "ops/" + inner[1]
    return inner[0]


def layer_of(component):
    for i, (_, comps) in enumerate(LAYERS):
        if component in comps or ("ops/*" in comps and component.startswith("ops/")):
            return i
    return None


def resolve(includer, target, root):
    """The repository-relative file an include names (quoted includes only), or None."""
    candidates = [
        os.path.join(os.path.dirname(includer), target),
        os.path.join("include", target),
        os.path.join("src", target),
        os.path.join("testing", "include", target),
        target,
    ]
    for c in candidates:
        c = os.path.normpath(c)
        if os.path.isfile(os.path.join(root, c)):
            return c
    return None


def source_files(root):
    for top in ("include", "src", "bench", "tests", "testing"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def main(argv):
    report = "--report" in argv
    args = [a for a in argv if not a.startswith("--")]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    edges = {}  # component -> {component: example "file -> include"}
    files = sorted(source_files(root))
    longest = []
    for rel in files:
        comp = component_of(rel)
        if comp == "tilelink.hpp":
            continue  # the umbrella header includes every public layer by design
        if comp is None or layer_of(comp) is None:
            problems.append(f"{rel}: not in a known component (add its folder to LAYERS)")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
        longest.append((len(lines), rel))
        if len(lines) > MAX_LINES:
            problems.append(f"{rel}: {len(lines)} lines (at most {MAX_LINES})")
        for line in lines:
            m = INCLUDE.match(line)
            if not m:
                continue
            target = resolve(rel, m.group(1), root)
            if target is None:
                continue  # a generated or third-party header
            tcomp = component_of(target)
            if tcomp is None or tcomp == comp or tcomp == "tilelink.hpp":
                continue
            edges.setdefault(comp, {}).setdefault(tcomp, f"{rel} -> {m.group(1)}")
    # Layering.
    for comp, targets in sorted(edges.items()):
        for tcomp, example in sorted(targets.items()):
            lc, lt = layer_of(comp), layer_of(tcomp)
            if lt is None:
                problems.append(f"{example}: includes unknown component {tcomp}")
            elif lt > lc:
                problems.append(f"{example}: layer '{LAYERS[lc][0]}' includes the higher layer '{LAYERS[lt][0]}'")
            elif lt == lc and comp == "ops/common":
                problems.append(f"{example}: ops/common, below every op, includes the op {tcomp}")
            elif lt == lc and not comp.startswith(("ops/", "tests/")):
                problems.append(f"{example}: {comp} and {tcomp} share a layer")
    # Cycles between components (depth-first search).
    state = {}

    def visit(c, path):
        state[c] = 1
        for t in sorted(edges.get(c, {})):
            if state.get(t) == 1:
                cycle = path[path.index(t):] + [t] if t in path else [c, t]
                problems.append("include cycle: " + " -> ".join(cycle))
            elif state.get(t) is None:
                visit(t, path + [t])
        state[c] = 2

    for c in sorted(edges):
        if state.get(c) is None:
            visit(c, [c])
    if report:
        print("components and what they include:")
        for comp in sorted(edges, key=lambda c: (layer_of(c) or 0, c)):
            print(f"  {comp:18s} -> {', '.join(sorted(edges[comp]))}")
        longest.sort(reverse=True)
        print(f"{len(files)} source files; the longest: " +
              ", ".join(f"{p} ({n})" for n, p in longest[:5]))
    for p in problems:
        print("layout: " + p)
    if problems:
        print(f"layout: {len(problems)} problem(s)")
        return 1
    print("layout: ok (no include from a lower layer to a higher one, no include cycle between "
          f"components, no source file over {MAX_LINES} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
