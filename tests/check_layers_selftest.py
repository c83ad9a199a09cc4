#!/usr/bin/env python3
"""check_layers.py finds what it is for: a tree with one of each fault fails, naming both files;
the same tree without them passes. usage: check_layers_selftest.py CHECK_LAYERS_PY"""
import os
import subprocess
import sys
import tempfile


def tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def run(check, root):
    r = subprocess.run([sys.executable, check, root], capture_output=True, text=True)
    return r.returncode, r.stdout


GOOD = {
    "LAYERS": "low\nhigh\nops/*\n",
    "low/a.h": "int a(void);\n",
    "low/a.c": '#include "a.h"\nint a(void) { return 1; }\n',
    "high/b.h": '#include "a.h"\nint b(void);\nstatic inline int b2(void) { return 2; }\n',
    "high/b.c": '#include "b.h"\nint b(void) { return a(); }\n',
    "ops/one/one.c": '#include "b.h"\nint one(void);\nint one(void) { return b(); }\n',
    "ops/two/two.c": '#include "b.h"\nint two(void);\nint two(void) { return b(); }\n',
}


def main():
    check = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as root:
        tree(root, GOOD)
        rc, out = run(check, root)
        if rc != 0:
            failures.append("a good tree failed:\n" + out)
    cases = {
        "upward include": ({"low/a.c": '#include "a.h"\n#include "b.h"\nint a(void) { return 1; }\n'},
                           "src/low/a.c includes src/high/b.h"),
        "sibling op": ({"ops/two/two.c": '#include "b.h"\n#include "../one/one.c"\n'},
                       "src/ops/two/two.c includes src/ops/one/one.c: one op's folder"),
        "cycle": ({"high/c.h": '#include "d.h"\n', "high/d.h": '#include "c.h"\n'}, "include cycle: src/high/c.h"),
        "undefined declaration": ({"low/a.h": "int a(void);\nint gone(void);\n"},
                                  "src/low/a.h declares gone, which src/low/a.c does not define"),
        "long file": ({"low/a.c": '#include "a.h"\nint a(void) { return 1; }\n' + "\n" * 600}, "over 600"),
    }
    for name, (change, expected) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            files = dict(GOOD)
            files.update(change)
            tree(root, files)
            rc, out = run(check, root.rstrip("/"))
            text = out.replace(root, "src")
            if rc == 0 or expected not in text:
                failures.append(f"{name}: rc {rc}, expected a line with {expected!r}:\n{text}")
    for f in failures:
        print(f)
    print("check_layers self-test: " + ("ok" if not failures else f"{len(failures)} failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
