"""The package and its library agree: one version (meson.build's) in the package, the header
and the library, and a library of another version is refused at load with both versions named."""

import os
import re
import shutil
import subprocess
import sys

from _support import skip, tempdir

import kvjit
from kvjit import _lib

FAKE_LIB = r"""
const char *kvjit_version_string(void) { return "9.9.9"; }
unsigned kvjit_version_number(void) { return 90909; }
"""


def test_one_version_source():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    meson = os.path.join(root, "meson.build")
    if not os.path.exists(meson):
        skip("not a source tree")
    m = re.search(r"project\(\s*'kvjit'.*?\bversion:\s*'([^']+)'", open(meson).read(), re.S)
    assert m and kvjit.__version__ == m.group(1) == kvjit.version(), (m and m.group(1), kvjit.__version__)
    header = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(kvjit.library_path()))), "include",
                          "kvjit_version.h")
    if os.path.exists(header):  # a build tree's generated header
        assert f'#define KVJIT_VERSION_STRING "{kvjit.__version__}"' in open(header).read()


def test_a_library_of_another_version_is_refused():
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        skip("no C compiler to build a stand-in library")
    with tempdir() as d:
        src, lib = os.path.join(d, "fake.c"), os.path.join(d, "libkvjit.so")
        with open(src, "w") as f:
            f.write(FAKE_LIB)
        subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("KVJIT_LIB", "LD_LIBRARY_PATH")}
        code = ("import kvjit\ntry:\n    kvjit.library_path()\nexcept kvjit.LibraryVersionError as e:\n"
                "    print('refused', e.library_version, e.package_version, e)\n")
        package_dir = os.path.dirname(os.path.dirname(kvjit.__file__))
        r = subprocess.run([sys.executable, "-c", code], cwd=package_dir, env=dict(env, KVJIT_LIB=lib),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"refused 9.9.9 {_lib.PACKAGE_VERSION} "), r.stdout
        assert lib in r.stdout and "KVJIT_LIB" in r.stdout, r.stdout
        # Beside a copy of the package: refused too, and the search goes on to say what it tried.
        shutil.copytree(os.path.dirname(kvjit.__file__), os.path.join(d, "kvjit"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
        with open(os.path.join(d, "kvjit", "_version.py"), "w") as f:
            f.write(f"version = {kvjit.__version__!r}\n")
        shutil.copy(lib, os.path.join(d, "kvjit", "libkvjit.so"))
        r = subprocess.run([sys.executable, "-c", code], cwd=d, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        if "refused" not in r.stdout:  # a matching system-wide libkvjit (ldconfig) answered instead
            return
        assert "version 9.9.9" in r.stdout, r.stdout


def test_native_module_stub_matches_the_module():
    """kvjit/_C.pyi declares every function of kvjit._C with the parameters the module really takes
    (their names, order, kinds and defaults, read from the docstrings' signatures)."""
    import ast
    import inspect

    from kvjit import _ops

    native = _ops.native()
    with open(os.path.join(os.path.dirname(kvjit.__file__), "_C.pyi")) as f:
        stub = {node.name: node.args for node in ast.parse(f.read()).body if isinstance(node, ast.FunctionDef)}

    def stub_params(a):
        params = [(p.arg, "POSITIONAL_ONLY") for p in a.posonlyargs] + [(p.arg, "POSITIONAL_OR_KEYWORD")
                                                                          for p in a.args]
        defaults = [None] * (len(params) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
        out = [(name, kind, d is not None or i >= len(params) - len(a.defaults), d)
               for i, ((name, kind), d) in enumerate(zip(params, defaults))]
        out += [(p.arg, "KEYWORD_ONLY", d is not None, None if d is None else ast.literal_eval(d))
                for p, d in zip(a.kwonlyargs, a.kw_defaults)]
        return out

    def real_params(fn):
        return [(p.name, p.kind.name, p.default is not p.empty, None if p.default is p.empty else p.default)
                for p in inspect.signature(fn).parameters.values()]

    functions = sorted(n for n in dir(native) if not n.startswith("_") and callable(getattr(native, n)))
    assert sorted(stub) == functions
    for name in functions:
        assert stub_params(stub[name]) == real_params(getattr(native, name)), name
