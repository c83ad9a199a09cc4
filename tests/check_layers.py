#!/usr/bin/env python3
"""The shape of src/, checked (issue 26): one-way layers, no include cycles, small files.

usage: check_layers.py SRC_DIR [--tree]

Reads every #include "..." of every file under SRC_DIR and fails (exit 1, one line per finding,
naming both files) on:
  - an include of a file in a higher layer (the order is SRC_DIR/LAYERS), or of a sibling op folder;
  - an include cycle between files, counted per module (X.c and X.h are one module: a cycle through
    a header is a cycle between the .c files that define and use it);
  - a function or extern variable declared in X.h and not defined in X.c (a header without a .c
    of its own: not defined in any .c of its folder), static inline functions excepted;
  - a .c over MAX_LINES lines.
It prints the house's floors (the longest include chain, overall and inside each folder) first.
An include that names no file under SRC_DIR (kvjit.h, system and toolkit headers) is not checked.
"""
import os
import re
import sys

MAX_LINES = 600
SOURCE_SUFFIXES = (".c", ".h", ".cpp")


def read_layers(src):
    """(order, skipped): the layers bottom up, and the folders not checked (`!folder`)."""
    path = os.path.join(src, "LAYERS")
    if not os.path.exists(path):
        return None, set()
    order, skipped = [], set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.startswith("!"):
                skipped.add(line[1:].strip())
            elif line:
                order.append(line)
    return order, skipped


def folder_of(rel):
    return os.path.dirname(rel) or "."


def layer_of(rel, order):
    """(rank, name) of a file's folder; an op folder ops/NAME is `ops/*`."""
    folder = folder_of(rel)
    for i, name in enumerate(order):
        if name == folder or (name.endswith("/*") and os.path.dirname(folder) == name[:-2]):
            return i, name
    return None, None


def strip_code(text):
    """Comments, string and char literals and preprocessor lines removed (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    lines = []
    continued = False
    for line in "".join(out).split("\n"):
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def drop_attributes(s):
    """__attribute__((...)) and KVJIT_API-like markers out of a declaration."""
    while True:
        m = re.search(r"__attribute__\s*\(", s)
        if not m:
            break
        depth, j = 0, m.end() - 1
        while j < len(s):
            depth += {"(": 1, ")": -1}.get(s[j], 0)
            j += 1
            if depth == 0:
                break
        s = s[: m.start()] + s[j:]
    return re.sub(r"\bKVJIT_API\b", "", s)


IDENT_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*)\s*\($")


def top_level_statements(code):
    """(head, kind) of each file-scope statement: kind ';' (declaration) or '{' (a body follows)."""
    depth, head = 0, []
    for c in code:
        if depth == 0:
            if c == ";":
                yield "".join(head), ";"
                head = []
            elif c == "{":
                yield "".join(head), "{"
                head = []
                depth = 1
            else:
                head.append(c)
        else:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    head = []  # what follows a body (a struct's declarator, an initializer's ;) is dropped
    return


def declared_name(head):
    """The name a file-scope declaration declares, and whether it is a function; None when none."""
    head = " ".join(drop_attributes(head).split())
    if not head or head.startswith(("typedef", "struct ", "enum ", "union ")) and "(" not in head.split("{")[0]:
        return None, False
    if head.startswith("typedef") or head.startswith("extern \"C\""):
        return None, False
    if "=" in head:
        head = head.split("=", 1)[0].rstrip()
    if "(" in head:
        pre = head[: head.index("(") + 1]
        m = IDENT_BEFORE_PAREN.search(pre)
        if not m:
            return None, False  # a function pointer variable or a macro call: not checked
        return m.group(1), True
    m = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\])*$", head)
    return (m.group(1), False) if m else (None, False)


def declarations(code):
    """Names a header declares and does not define: non-static functions and extern variables."""
    names = []
    for head, kind in top_level_statements(code):
        words = head.split()
        if kind != ";" or not words or "static" in words:
            continue
        name, is_function = declared_name(head)
        if name and (is_function or "extern" in words):
            names.append(name)
    return names


def definitions(code):
    """Names a .c defines: functions with a body and variables with or without an initializer."""
    names = set()
    for head, kind in top_level_statements(code):
        words = head.split()
        if not words or "extern" in words or words[0] == "typedef":
            continue
        name, is_function = declared_name(head)
        if name is None:
            continue
        if kind == "{" and (is_function or "=" in head):
            names.add(name)
        elif kind == ";" and not is_function:
            names.add(name)
    return names


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    src = os.path.normpath(argv[1])
    order, skipped = read_layers(src)
    files = {}
    for root, _, names in os.walk(src):
        for name in sorted(names):
            if name.endswith(SOURCE_SUFFIXES):
                rel = os.path.relpath(os.path.join(root, name), src)
                if rel.split(os.sep)[0] in skipped:
                    continue
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    files[rel] = f.read()
    by_base = {}
    for rel in files:
        by_base.setdefault(os.path.basename(rel), []).append(rel)

    problems = []

    def resolve(rel, inc):
        here = os.path.normpath(os.path.join(folder_of(rel), inc))
        if here in files:
            return here
        if inc in files:
            return inc
        found = by_base.get(os.path.basename(inc), [])
        if len(found) > 1:
            problems.append(f"src/{rel}: include \"{inc}\" is ambiguous: {', '.join('src/' + f for f in found)}")
        return found[0] if len(found) == 1 else None

    includes = {}
    for rel, text in files.items():
        targets = []
        for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            target = resolve(rel, m.group(1))
            if target and target != rel:
                targets.append(target)
        includes[rel] = targets

    # One-way layers.
    if order is not None:
        for rel in sorted(files):
            rank, layer = layer_of(rel, order)
            if rank is None:
                problems.append(f"src/{rel}: folder {folder_of(rel)} is in no layer of src/LAYERS")
                continue
            for target in includes[rel]:
                trank, tlayer = layer_of(target, order)
                if trank is None:
                    continue
                if trank > rank:
                    problems.append(f"src/{rel} includes src/{target}: {layer} may not use {tlayer}, a higher layer")
                elif layer.endswith("/*") and trank == rank and folder_of(rel) != folder_of(target):
                    problems.append(f"src/{rel} includes src/{target}: one op's folder may not use another's")

    # Include cycles between modules (X.c + X.h).
    def module(rel):
        return os.path.splitext(rel)[0]

    graph = {}
    witness = {}
    for rel, targets in includes.items():
        a = module(rel)
        graph.setdefault(a, set())
        for target in targets:
            b = module(target)
            if a != b:
                graph[a].add(b)
                witness.setdefault((a, b), (rel, target))
    index, low, stack, on_stack, sccs = {}, {}, [], set(), []

    def strongconnect(v):
        # Tarjan's algorithm, iteratively (the graph is small but recursion limits are not ours).
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                sccs.append(comp)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    comp_of = {}
    for i, comp in enumerate(sccs):
        for v in comp:
            comp_of[v] = i
        if len(comp) > 1:
            members = set(comp)
            a = min(comp)
            b = min(t for t in graph[a] if t in members)
            fa, fb = witness[(a, b)]
            back = [t for t in sorted(members) if t != a and a in graph.get(t, ())]
            via = f" and src/{witness[(back[0], a)][0]} includes src/{witness[(back[0], a)][1]}" if back else ""
            problems.append(f"include cycle: src/{fa} includes src/{fb}{via} "
                            f"(circle of {len(comp)}: {', '.join(sorted(members))})")

    # Floors: the longest include chain over the condensed graph, overall and inside each folder.
    def floors(nodes):
        memo = {}

        def depth(v):
            if v in memo:
                return memo[v]
            memo[v] = 1
            best = 1
            for t in graph.get(v, ()):
                if t in nodes and comp_of[t] != comp_of[v]:
                    best = max(best, 1 + depth(t))
            memo[v] = best
            return best

        return max((depth(v) for v in nodes), default=0)

    modules = set(graph)
    folders = sorted({os.path.dirname(m) or "." for m in modules})
    circles = sum(1 for comp in sccs if len(comp) > 1)
    print(f"src/: {len(files)} files, {len(modules)} modules on {floors(modules)} floors, {circles} circles")
    for folder in folders:
        inside = {m for m in modules if (os.path.dirname(m) or ".") == folder}
        rank = layer_of(next(iter(inside)) + ".c", order)[0] if order else None
        layer = f"layer {rank + 1}" if rank is not None else "no layer"
        print(f"  {folder + '/':<18} {layer:<9} {len(inside):3d} modules {floors(inside):3d} floors")

    # Declarations in X.h defined in X.c; files small enough to read in one sitting.
    code = {rel: strip_code(text) for rel, text in files.items()}
    defined = {rel: definitions(c) for rel, c in code.items() if rel.endswith((".c", ".cpp"))}
    for rel in sorted(files):
        if rel.endswith(".h"):
            own = os.path.splitext(rel)[0] + ".c"
            if own in files:
                where, names = f"src/{own}", defined[own]
            else:
                folder = folder_of(rel)
                where = f"any .c of src/{folder}/"
                names = set().union(*[d for c, d in defined.items() if folder_of(c) == folder])
            for name in declarations(code[rel]):
                if name not in names:
                    problems.append(f"src/{rel} declares {name}, which {where} does not define")
        elif rel.endswith(".c"):
            lines = files[rel].count("\n")
            if lines > MAX_LINES:
                problems.append(f"src/{rel}: {lines} lines, over {MAX_LINES}: a file is one job")

    for p in problems:
        print(p)
    print(f"{len(problems)} problems" if problems else "layers: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
