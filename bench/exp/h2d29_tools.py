#!/usr/bin/env python3
# EXPERIMENT (h2d29, not for main): `sass DIR` counts the global load/store forms in the cubins of a
# kvjit cache dir; `pivot CSV...` prints bench_host_layouts --variants results as one line per cell.
import collections, glob, re, shutil, subprocess, sys, tempfile


def sass(d):
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    cnt = collections.Counter()
    for f in glob.glob(d + "/**/*.kvjit", recursive=True):
        b = open(f, "rb").read()
        i = b.find(b"\x7fELF")
        if i < 0:
            continue
        e = b[i:]  # the cubin runs to the end of the entry
        with tempfile.NamedTemporaryFile(suffix=".cubin") as t:
            t.write(e)
            t.flush()
            out = subprocess.run([tool, "-sass", t.name], capture_output=True, text=True).stdout
        cnt.update(re.findall(r"\b((?:LDG|STG|LD|ST)\.[A-Z0-9_.]+)", out))
    for k, v in sorted(cnt.items()):
        print(f"{v:6d} {k}")


def pivot(files):
    cells, names = collections.OrderedDict(), []
    for f in files:
        for line in open(f).read().splitlines()[1:]:
            ld, pdl, lay, d, row, batch, us, mn, gbps, pct, ok = line.split(",")
            v = f"{ld}:{pdl}"
            if v not in names:
                names.append(v)
            cells.setdefault((lay, d, int(row), int(batch)), {})[v] = (float(us), float(pct), ok)
    print("cell (us / % of link)".ljust(36) + "".join(f"{v:>14}" for v in names))
    for (lay, d, row, batch), vals in cells.items():
        line = f"{lay[:10]} {d} {row:5d} x{batch:6d}".ljust(36)
        for v in names:
            if v in vals:
                us, pct, ok = vals[v]
                line += f"{us:8.1f}/{pct:4.1f}" + ("" if ok == "ok" else "!")
            else:
                line += " " * 14
        print(line)


if __name__ == "__main__":
    sass(sys.argv[2]) if sys.argv[1] == "sass" else pivot(sys.argv[2:])
