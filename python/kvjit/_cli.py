"""The `kvjit` command of a pip-installed package: runs the CLI binary shipped inside it."""

import os
import sys


def binary_path():
    """Where the wheel puts the kvjit executable (next to libkvjit, found through its RPATH)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "kvjit")


def main():
    path = binary_path()
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"kvjit: {path} is missing: this kvjit package was not installed from a wheel "
                         f"(pip install .); in a source tree run build/src/kvjit\n")
        return 127
    os.execv(path, ["kvjit"] + sys.argv[1:])
    return 127  # not reached: execv replaces the process or raises OSError


if __name__ == "__main__":
    sys.exit(main())
