#!/usr/bin/env python3
"""The README shows what works, as written.

check_readme_examples.py SOURCE_ROOT
    Each README code block under a "<!-- example: PATH -->" line is PATH's text, so the README
    shows code that the test suites build and run.
check_readme_examples.py SOURCE_ROOT --run BUILD_DIR
    Also runs the README's shell commands as written, with BUILD_DIR's `kvjit` first on PATH, in
    a temp dir, a temp cache dir (KVJIT_CACHE_DIR) and a temp HOME: every line of every ```sh
    block, and the complete commands among the inline `kvjit ...` / `scripts/main.sh ...` spans.
    Each must exit 0. A line another suite runs, or that needs what CI does not have (the fleet's
    remote, a serving script), is skipped with the reason printed; a line this script does not
    know how to classify is a failure, so a new README command is either run or explained.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

# (pattern on the command line, why it is not run here). The first match wins.
NOT_RUN_HERE = [
    (r"^scripts/test\.sh\b", "the test suites themselves (this check is one of them)"),
    (r"^pip install\b", "the wheel suite (scripts/test_wheel.sh) builds, installs and runs it"),
    (r"^meson setup build && meson install -C build$",
     "installs into /usr/local (root): the install suite installs this build with --destdir and runs the "
     "README's non-default prefix lines as written"),
    (r"^meson (setup|install)\b", "the install suite (scripts/test_install.sh) runs it"),
    (r"^export PKG_CONFIG_PATH|^cc prewarm\.c|^\./a\.out", "the install suite (scripts/test_install.sh) runs it"),
    (r"cache\.example", "needs the fleet's remote; the remote suite tests the tier against nginx"),
    (r"^bash python/tests/run_gpu\.sh", "needs a GPU and torch (the lead's GPU run)"),
    (r"^python3 python/tests/run\.py", "the python suite runs it"),
]
# Inline spans that mention a command rather than show one to type: a placeholder, or the command
# words alone ("`kvjit prewarm -n` marks each line"; on a machine without a GPU those need --arch).
MENTION = re.compile(r"\b(FILE|DIR|file)\b|^kvjit( cache)? [a-z]+( -n)?$")


def code_blocks(text, lang):
    return re.findall(r"```" + lang + r"\n(.*?)```", text, re.S)


def commands_of(block):
    """Logical lines of a sh block: continuations joined, comments and blank lines dropped."""
    out, pending = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line.strip())
    return out


def check_examples(root, readme):
    marked = re.findall(r"<!-- example: (\S+) -->\n```\w*\n(.*?)```\n", readme, re.S)
    problems = []
    if not marked:
        problems.append("README.md has no <!-- example: PATH --> blocks")
    for path, block in marked:
        try:
            text = open(os.path.join(root, path), encoding="utf-8").read()
        except OSError as e:
            problems.append(f"{path}: {e}")
            continue
        if block != text:
            a, b = block.splitlines(), text.splitlines()
            line = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            problems.append(f"{path}: the README block differs from the file at line {line + 1}")
    print(f"check_readme_examples: {len(marked)} example blocks")
    return problems


def run_commands(root, readme, build):
    commands = [c for b in code_blocks(readme, "sh") for c in commands_of(b)]
    inline = re.findall(r"`((?:kvjit|scripts/main\.sh) [^`]*|kvjit)`", readme)
    commands += [c for c in dict.fromkeys(inline) if not MENTION.search(c) and c not in commands]
    tmp = tempfile.mkdtemp(prefix="kvjit-readme-")
    problems = []
    try:
        work, home = os.path.join(tmp, "work"), os.path.join(tmp, "home")
        os.makedirs(work)
        os.makedirs(home)
        env = dict(os.environ, HOME=home, KVJIT_CACHE_DIR=os.path.join(tmp, "cache"), KVJIT_BUILD_DIR=build,
                   PATH=os.path.join(build, "src") + os.pathsep + os.environ.get("PATH", ""))
        for var in ("KVJIT_CACHE_PATH", "KVJIT_REMOTE_CACHE", "KVJIT_MANIFEST", "KVJIT_COMPILE"):
            env.pop(var, None)
        for command in commands:
            why = next((w for p, w in NOT_RUN_HERE if re.search(p, command)), None)
            if why is not None:
                print(f"skip: {command}\n  ({why})")
                continue
            if not re.match(r"^(kvjit|scripts/main\.sh)\b", command):
                problems.append(f"does not know how to run '{command}': run it here or say why not in NOT_RUN_HERE")
                continue
            if "--manifest recorded.txt" in command:
                # What a run with KVJIT_MANIFEST records: manifest lines (cache/MANIFEST.md).
                lines = subprocess.run(["kvjit", "prewarm", "-n", "--arch", "sm_90", "--k-row-bytes", "2048",
                                        "--index", "int64"], cwd=work, env=env, capture_output=True, text=True)
                with open(os.path.join(work, "recorded.txt"), "w") as f:
                    f.write(lines.stdout)
            # scripts/ lines run from the source root, as the README's readers do.
            cwd = root if command.startswith("scripts/") else work
            r = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=600)
            status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
            print(f"{status}: {command.split('  #')[0].strip()}")
            if r.returncode != 0:
                tail = (r.stdout + r.stderr).strip().splitlines()[-8:]
                problems.append(f"'{command}' exited {r.returncode}:\n    " + "\n    ".join(tail))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return problems


def main(argv):
    root = argv[1]
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    problems = check_examples(root, readme)
    if len(argv) == 4 and argv[2] == "--run":
        problems += run_commands(os.path.abspath(root), readme, os.path.abspath(argv[3]))
    elif len(argv) != 2:
        sys.exit(__doc__)
    for p in problems:
        print("check_readme_examples:", p)
    print(f"check_readme_examples: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
