#!/usr/bin/env python3
"""Run kvjit's Python tests: with pytest when it is importable, else with a small built-in runner
(plain test_* functions, _support.parametrize, _support.skip). Ends with
"N passed, N failed, N skipped".

usage: run.py [--builtin] [-v] [-k SUBSTRING] [PATH...]    (default: every test_*.py beside this)
exit:  0 all passed (some may have skipped), 77 everything skipped, 1 a failure or nothing ran.
"""

import argparse
import atexit
import glob
import importlib.util
import itertools
import os
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def exit_code(passed, failed, skipped, runner, start):
    print(f"{runner}: {time.perf_counter() - start:.1f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    if failed or passed + skipped == 0:
        return 1
    return 77 if passed == 0 else 0


def test_files(paths):
    files = []
    for path in paths or [HERE]:
        if os.path.isdir(path):
            files.extend(sorted(glob.glob(os.path.join(path, "test_*.py"))))
        else:
            files.append(path)
    return files


# ---- pytest ------------------------------------------------------------------------------------


class _Counter:
    """pytest plugin: counts outcomes the way the built-in runner does (one per test case)."""

    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed += 1
        elif report.failed:
            self.failed += 1
        elif report.skipped:
            self.skipped += 1


def run_pytest(pytest, files, args):
    start = time.perf_counter()
    counter = _Counter()
    argv = files + ["-p", "no:cacheprovider", "-rs", "-v" if args.verbose else "-q"]
    if args.k:
        argv += ["-k", args.k]
    status = pytest.main(argv, plugins=[counter])
    code = exit_code(counter.passed, counter.failed, counter.skipped, "pytest", start)
    if status not in (0, 5) and code != 1:  # interrupted, internal or usage error
        print(f"pytest exited {int(status)}")
        return 1
    return code


# ---- built-in runner ---------------------------------------------------------------------------


def _label(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return str(value)
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, (tuple, list)) and len(value) <= 4:
        return "x".join(_label(v) for v in value)
    return type(value).__name__


def cases(func):
    """(id, kwargs) for each parameter combination of @p func."""
    params = getattr(func, "kvjit_params", [])
    if not params:
        yield func.__name__, {}
        return
    axes = []
    for argnames, values in params:
        names = [n.strip() for n in argnames.split(",")]
        axis = []
        for value in values:
            value = value if len(names) > 1 else (value,)
            axis.append(dict(zip(names, value)))
        axes.append(axis)
    for i, combo in enumerate(itertools.product(*axes)):
        kwargs = {}
        for part in combo:
            kwargs.update(part)
        label = "-".join(_label(v) for part in combo for v in part.values())
        yield f"{func.__name__}[{i}:{label}]", kwargs


def run_builtin(files, args):
    import _support

    skips = _support.skip_exceptions()
    start = time.perf_counter()
    passed = failed = skipped = 0
    for path in files:
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except skips as e:
            print(f"SKIP {name}: {e}")
            skipped += 1
            continue
        except Exception:
            print(f"FAIL {name}: import\n{traceback.format_exc()}")
            failed += 1
            continue
        tests = [f for n, f in vars(module).items()
                 if n.startswith("test_") and callable(f) and getattr(f, "__module__", None) == name]
        for func in tests:
            for case_id, kwargs in cases(func):
                full = f"{name}::{case_id}"
                if args.k and args.k not in full:
                    continue
                t0 = time.perf_counter()
                try:
                    func(**kwargs)
                except skips as e:
                    skipped += 1
                    print(f"SKIP {full}: {e}")
                    continue
                except Exception:
                    failed += 1
                    print(f"FAIL {full}\n{traceback.format_exc()}")
                    continue
                passed += 1
                if args.verbose:
                    print(f"PASS {full} ({time.perf_counter() - t0:.2f} s)")
    return exit_code(passed, failed, skipped, "built-in runner", start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builtin", action="store_true", help="use the built-in runner even when pytest is there")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("-k", help="run only tests whose id contains this")
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args()
    files = test_files(args.paths)
    if not os.environ.get("KVJIT_CACHE_DIR"):
        # Nothing lands in ~/.cache: the default context's cache goes to a dir removed at exit.
        cache = tempfile.TemporaryDirectory(prefix="kvjit-py-cache-")
        atexit.register(cache.cleanup)
        os.environ["KVJIT_CACHE_DIR"] = cache.name
    pytest = None
    if not args.builtin:
        try:
            import pytest
        except ImportError:
            pass
    return run_pytest(pytest, files, args) if pytest else run_builtin(files, args)


if __name__ == "__main__":
    sys.exit(main())
