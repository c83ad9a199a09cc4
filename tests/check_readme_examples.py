#!/usr/bin/env python3
"""Check that each README code block under a "<!-- example: PATH -->" line is PATH's text, so the
README shows code that the test suites build and run. usage: check_readme_examples.py SOURCE_ROOT"""

import os
import re
import sys


def main(root):
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
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
    for p in problems:
        print("check_readme_examples:", p)
    print(f"check_readme_examples: {len(marked)} blocks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
