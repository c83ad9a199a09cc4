"""The generic loader: CUDA source + options + kernel names -> cached, launchable kernels."""

import ctypes

from . import _context, _lib, _ops


def _text(value, name):
    if isinstance(value, str):
        value = value.encode()
    elif not isinstance(value, bytes):
        raise TypeError(f"{name}: expected str or bytes, got {type(value).__name__}")
    if b"\0" in value:  # C would read the text only up to it
        raise ValueError(f"{name}: contains a NUL character")
    return value


def _strings(values, name):
    if isinstance(values, (str, bytes)):
        values = [values]
    elif not isinstance(values, (list, tuple)):
        raise TypeError(f"{name}: expected a str or a list of str, got {type(values).__name__}")
    items = [_text(v, f"{name}[{i}]") for i, v in enumerate(values)]
    return items, (ctypes.c_char_p * max(len(items), 1))(*items)


class Program:
    """A CUDA program compiled by NVRTC for one target and cached on disk.

        prog = kvjit.Program(src, kernels=["scale<256, float>"], options=["-std=c++17", "-Iinclude"])
        prog.kernel("scale<256,float>").launch(grid, 256, [ptr, ctypes.c_float(2.0), ctypes.c_int(n)])

    Nothing is compiled at construction. kernel()/load() compile or fetch and load (needs a GPU);
    build(arch) compiles or fetches without loading and returns a Binary (key, log, lowered
    names, cubin or PTX bytes; no driver needed); compile(arch) only fills the disk cache.
    kernels are extern "C" names or C++ name expressions (whitespace does not matter); options
    are NVRTC options (no --gpu-architecture: use arch; -I dirs are searched by kvjit, which keys
    every header by content); headers maps include names to their source. arch: 0 (the current
    device), a compute capability (90) or a target ("sm_90a", "sm_100f", "compute_90").
    """

    def __init__(self, source, kernels, options=(), *, name="kvjit_program.cu", headers=None, arch=0, context=None):
        self._context = _context.context_arg(context)
        self._source = _text(source, "source")
        self._name = _text(name, "name")
        self._kernel_names, self._kernel_array = _strings(kernels, "kernels")
        if not self._kernel_names:
            raise ValueError("kernels: at least one kernel name is needed")
        self._options, self._option_array = _strings(options, "options")
        if headers is None:
            headers = {}
        elif not hasattr(headers, "items"):
            raise TypeError(f"headers: expected a dict of include name -> source, got {type(headers).__name__}")
        headers = dict(headers)
        self._header_strings = []
        self._header_array = (_lib.Header * max(len(headers), 1))()
        for i, (hname, hsource) in enumerate(headers.items()):
            pair = (_text(hname, "headers key"), _text(hsource, f"headers[{hname!r}]"))
            self._header_strings.append(pair)
            self._header_array[i] = _lib.Header(*pair)
        self._num_headers = len(headers)
        self._arch = self._parse_arch(arch)
        self._handle = None
        self._kernels = {}

    def _parse_arch(self, arch):
        if isinstance(arch, int) and not isinstance(arch, bool):
            if not 0 <= arch < 2**31:
                raise ValueError(f"arch: must be 0 (the current device), a compute capability or a target code, "
                                 f"got {arch}")
            return arch
        if isinstance(arch, str):
            return parse_target(arch)
        raise TypeError(f"arch: expected an int (90) or a target string ('sm_90', 'sm_90a', 'compute_90'), "
                        f"got {type(arch).__name__}")

    def _desc(self, arch):
        return self._context._lib.new(
            _lib.ProgramDesc, name=self._name, source=self._source,
            options=ctypes.cast(self._option_array, ctypes.POINTER(ctypes.c_char_p)), num_options=len(self._options),
            headers=ctypes.cast(self._header_array, ctypes.POINTER(_lib.Header)), num_headers=self._num_headers,
            kernels=ctypes.cast(self._kernel_array, ctypes.POINTER(ctypes.c_char_p)),
            num_kernels=len(self._kernel_names), arch=arch)

    def _call(self, fn_name, arch):
        """One of kvjit_program_get / _build; (status, program handle or None, origin name)."""
        ctx = self._context
        ctx._require_open()
        desc = self._desc(arch)
        handle = ctypes.c_void_p()
        origin = ctypes.c_int(0)
        lib = ctx._lib
        status = lib.fn[fn_name](ctx._handle, ctypes.byref(handle), ctypes.byref(origin), ctypes.byref(desc))
        return status, handle.value, _lib.ORIGIN_NAMES.get(origin.value, str(origin.value))

    def _raise(self, status, handle):
        lib = self._context._lib
        log = lib.fn["kvjit_program_log"](handle).decode(errors="replace") if handle else ""
        raise lib.error(status, log=log)

    def build(self, arch=None):
        """Compile or fetch the program for ``arch`` (default: the Program's; it must name a compute
        capability where there is no GPU) without loading it; needs no driver. Returns a Binary.
        Raises CompileError, with the full NVRTC log in .log, when NVRTC rejects the source."""
        arch = self._arch if arch is None else self._parse_arch(arch)
        status, handle, origin = self._call("kvjit_program_build", arch)
        if status != _lib.OK:
            self._raise(status, handle)
        return Binary(self._context, handle, origin)

    def compile(self, arch=None):
        """Make sure the program is in the disk cache for ``arch`` (default: the Program's; it must
        be set where there is no GPU). Needs no driver. Returns "disk", "compile" or "memory".
        Raises CompileError (its .log: NVRTC's full log) when NVRTC rejects the source."""
        arch = self._arch if arch is None else self._parse_arch(arch)
        ctx = self._context
        ctx._require_open()
        desc = self._desc(arch)
        origin = ctypes.c_int(0)
        lib = ctx._lib
        status = lib.fn["kvjit_program_compile"](ctx._handle, ctypes.byref(origin), ctypes.byref(desc))
        if status == _lib.ERR_COMPILE:
            # The failure is remembered: build() hands out its log without running NVRTC again.
            err = lib.error(status)
            _, handle, _ = self._call("kvjit_program_build", arch)
            if handle:
                err.log = lib.fn["kvjit_program_log"](handle).decode(errors="replace")
            raise err
        lib.check(status)
        return _lib.ORIGIN_NAMES.get(origin.value, str(origin.value))

    def load(self):
        """Compile or fetch and load the program (kvjit_program_get); returns where it came from
        ("memory", "disk" or "compile"). Raises CompileError with .log on a compile error."""
        status, handle, origin = self._call("kvjit_program_get", self._arch)
        if status != _lib.OK:
            self._raise(status, handle)
        self._handle = handle
        return origin

    def _require_loaded(self):
        if self._handle is None:
            self.load()
        return self._handle

    @property
    def log(self):
        """NVRTC's log of a loaded program ("" when it came from the disk cache)."""
        handle = self._require_loaded()
        return self._context._lib.fn["kvjit_program_log"](handle).decode(errors="replace")

    @property
    def key(self):
        """The cache key of the loaded program (32 hex digits)."""
        handle = self._require_loaded()
        return self._context._lib.fn["kvjit_program_key"](handle).decode()

    @property
    def arch(self):
        """Target code the loaded program was built for (90, or with TARGET_* flags; see target_name)."""
        handle = self._require_loaded()
        return self._context._lib.fn["kvjit_program_arch"](handle)

    def global_address(self, name):
        """(device address, size in bytes) of the loaded program's extern "C" __device__ variable
        ``name``, in the current CUDA context."""
        handle = self._require_loaded()
        lib = self._context._lib
        address, size = ctypes.c_uint64(), ctypes.c_size_t()
        lib.check(lib.fn["kvjit_program_get_global"](handle, ctypes.byref(address), ctypes.byref(size),
                                                     _text(name, "name")))
        return address.value, size.value

    def kernel(self, name=None, index=0):
        """The Kernel by its name as given in kernels (or by index when name is None). Loads the
        program on first use."""
        key = name if name is not None else index
        kernel = self._kernels.get(key)
        if kernel is not None:
            return kernel
        handle = self._require_loaded()
        lib = self._context._lib
        out = ctypes.c_void_p()
        cname = None if name is None else _text(name, "name")
        lib.check(lib.fn["kvjit_program_kernel"](handle, ctypes.byref(out), cname, index))
        kernel = Kernel(self, out.value, name if name is not None else self._kernel_names[index].decode())
        self._kernels[key] = kernel
        return kernel

    def __repr__(self):
        return f"<kvjit.Program {self._name.decode()} kernels={[k.decode() for k in self._kernel_names]}>"


class Binary:
    """What a build produced (kvjit_program_build): readable without a GPU. Owned by its context.

    key (32 hex digits), target (its code) and target_name ("sm_90a"), kind ("cubin" or "ptx"),
    log (NVRTC's; "" from disk), origin ("memory", "disk", "compile"), kernels (canonical name
    expressions), lowered (their mangled names, as in the binary), code (the cubin or PTX bytes).
    """

    def __init__(self, context, handle, origin):
        self._context = context  # keeps the program's context alive
        lib = context._lib
        self.origin = origin
        self.key = lib.fn["kvjit_program_key"](handle).decode()
        self.target = lib.fn["kvjit_program_arch"](handle)
        self.target_name = target_name(self.target)
        self.kind = "ptx" if self.target & _lib.TARGET_PTX else "cubin"
        self.log = lib.fn["kvjit_program_log"](handle).decode(errors="replace")
        n = lib.fn["kvjit_program_num_kernels"](handle)
        self.kernels = [lib.fn["kvjit_program_kernel_name"](handle, i).decode() for i in range(n)]
        self.lowered = [lib.fn["kvjit_program_lowered_name"](handle, i).decode() for i in range(n)]
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        lib.check(lib.fn["kvjit_program_binary"](handle, ctypes.byref(data), ctypes.byref(size)))
        code = ctypes.string_at(data.value, size.value)
        self.code = code.rstrip(b"\0") if self.kind == "ptx" else code

    def __repr__(self):
        return f"<kvjit.Binary {self.target_name} {self.kind} {len(self.code)} B key={self.key}>"


def _dims(value, name):
    if isinstance(value, int) and not isinstance(value, bool):
        dims = (value, 1, 1)
    elif isinstance(value, (list, tuple)):
        dims = tuple(value) + (1,) * (3 - len(value))
        if len(dims) != 3:
            raise ValueError(f"{name}: at most 3 dimensions, got {value!r}")
    elif value is None:
        raise TypeError(f"{name}: expected an int or up to three ints, got None")
    else:  # a float, a str, ...: a value that is no dimension
        raise ValueError(f"{name}: expected an int or up to three ints, got {value!r}")
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool) or not 0 < d < 2**32:
            raise ValueError(f"{name}: each dimension must be an int >= 1, got {value!r}")
    return dims


def _attribute(name):
    if not isinstance(name, str) or name not in _lib.KERNEL_ATTRIBUTES:
        raise ValueError(f"attribute: expected one of {sorted(_lib.KERNEL_ATTRIBUTES)}, got {name!r}")
    return _lib.KERNEL_ATTRIBUTES[name]


def _device(device):
    if device is None:
        return _lib.CURRENT_DEVICE
    if not isinstance(device, int) or isinstance(device, bool) or not 0 <= device < 2**31:
        raise ValueError(f"device: expected None (the current device) or an ordinal >= 0, got {device!r}")
    return device


class Kernel:
    """A launchable kernel of a loaded Program; immutable, usable from any thread and stream."""

    def __init__(self, program, handle, name):
        self._program = program  # keeps the program (and its context) alive
        self._handle = handle
        self.name = name
        self._launch = program._context._lib.fn["kvjit_launch"]
        self._lib = program._context._lib

    def get_attribute(self, attribute, device=None):
        """An attribute ("num_regs", "max_dynamic_shared_size_bytes", ...) on ``device`` (default
        the current one)."""
        value = ctypes.c_int()
        self._lib.check(self._lib.fn["kvjit_kernel_get_attribute"](self._handle, _attribute(attribute),
                                                                   _device(device), ctypes.byref(value)))
        return value.value

    def set_attribute(self, attribute, value, device=None):
        """Set an attribute for launches on ``device``, e.g. set_attribute(
        "max_dynamic_shared_size_bytes", 200 * 1024) before a launch with that much shared memory."""
        if not isinstance(value, int) or isinstance(value, bool) or not -2**31 <= value < 2**31:
            raise ValueError(f"value: expected a 32-bit int, got {value!r}")
        self._lib.check(self._lib.fn["kvjit_kernel_set_attribute"](self._handle, _attribute(attribute),
                                                                   _device(device), value))

    @property
    def num_params(self):
        """How many parameters the kernel takes (CUDA 12.4+ drivers)."""
        count = ctypes.c_size_t()
        self._lib.check(self._lib.fn["kvjit_kernel_num_params"](self._handle, ctypes.byref(count)))
        return count.value

    def param_info(self, index):
        """(offset, size) in bytes of parameter ``index``."""
        offset, size = ctypes.c_size_t(), ctypes.c_size_t()
        self._lib.check(self._lib.fn["kvjit_kernel_param_info"](self._handle, index, ctypes.byref(offset),
                                                                ctypes.byref(size)))
        return offset.value, size.value

    def launch(self, grid, block, args, shared_bytes=0, stream=None, pdl=False, cluster=None, cooperative=False,
               priority=0):
        """Launch in the current CUDA context (kvjit_launch / cuLaunchKernelEx).

        grid, block: an int or up to three ints. args: one per kernel parameter, each a ctypes
        value (c_int, c_int64, c_float, c_void_p, a ctypes Structure, ...) or a CUDA tensor
        (passed as its device pointer). Python ints/floats are refused: their C width is
        ambiguous. A launch with another number of args than the kernel takes is refused. stream:
        an int handle or a stream object; default torch's current stream when an argument is a
        torch tensor, else the legacy default stream. pdl: programmatic stream serialization
        (sm_90+); cluster: thread-block cluster dims (sm_90+; each dividing grid); cooperative: a
        cooperative launch; priority: the launch's priority (0: the stream's)."""
        cfg = _lib.load().new(_lib.LaunchConfig)  # the one library loaded
        cfg.grid[:] = _dims(grid, "grid")
        cfg.block[:] = _dims(block, "block")
        if not isinstance(shared_bytes, int) or not 0 <= shared_bytes < 2**32:
            raise ValueError(f"shared_bytes: must be an int >= 0, got {shared_bytes!r}")
        cfg.shared_bytes = shared_bytes
        cfg.programmatic_serialization = 1 if pdl else 0
        if cluster is not None:
            cfg.cluster[:] = _dims(cluster, "cluster")
        cfg.cooperative = 1 if cooperative else 0
        if not isinstance(priority, int) or isinstance(priority, bool) or not -2**31 <= priority < 2**31:
            raise ValueError(f"priority: expected an int, got {priority!r}")
        cfg.priority = priority
        if not isinstance(args, (list, tuple)):
            raise TypeError(f"args: expected a list of kernel arguments, got {type(args).__name__}")
        values = []
        tensor_stream = None  # the first tensor's framework's stream (torch's current one)
        for i, arg in enumerate(args):
            if isinstance(arg, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)):
                values.append(arg)
            elif isinstance(arg, (bool, int, float)):
                raise TypeError(f"args[{i}]: wrap Python numbers in a ctypes type (ctypes.c_int, c_int64, c_float, "
                                f"c_void_p, ...) so the kernel gets the right width, got {arg!r}")
            else:
                d = _ops.native().describe(arg, f"args[{i}]")
                if tensor_stream is None:
                    tensor_stream = d[7]
                values.append(ctypes.c_void_p(d[0]))
        cfg.num_args = len(values)
        pointers = (ctypes.c_void_p * max(len(values), 1))()
        for i, value in enumerate(values):
            pointers[i] = ctypes.addressof(value)
        handle = _ops.stream_handle(stream)
        cfg.stream = tensor_stream if handle is None else handle
        status = self._launch(self._handle, ctypes.byref(cfg), pointers)
        if status:
            raise self._lib.error(status)

    def __repr__(self):
        return f"<kvjit.Kernel {self.name}>"


def nvrtc_archs():
    """Compute capabilities NVRTC can build for (e.g. [75, 80, 86, 89, 90, ...]); kvjit.Error
    ERR_NO_NVRTC without NVRTC."""
    lib = _lib.load()
    count = ctypes.c_size_t()
    lib.check(lib.fn["kvjit_nvrtc_archs"](None, 0, ctypes.byref(count)))
    out = (ctypes.c_int * max(count.value, 1))()
    lib.check(lib.fn["kvjit_nvrtc_archs"](out, count.value, ctypes.byref(count)))
    return list(out[:count.value])


def nvrtc_version():
    """(major, minor) of the NVRTC kvjit uses."""
    lib = _lib.load()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.check(lib.fn["kvjit_nvrtc_version"](ctypes.byref(major), ctypes.byref(minor)))
    return major.value, minor.value


def _int_result(fn_name, *args):
    """Call a library function whose last parameter receives an int; that int."""
    lib = _lib.load()
    out = ctypes.c_int()
    lib.check(lib.fn[fn_name](*args, ctypes.byref(out)))
    return out.value


def driver_version():
    """CUDA driver version (e.g. 13000); kvjit.Error ERR_NO_DRIVER without a driver."""
    return _int_result("kvjit_driver_version")


def device_count():
    """Number of CUDA devices; 0 without a driver (no driver, no device)."""
    try:
        return _int_result("kvjit_device_count")
    except _lib.Error as e:
        if e.status == _lib.ERR_NO_DRIVER:
            return 0
        raise


def device_info(ordinal):
    """(name, compute capability) of a device."""
    if type(ordinal) is not int or not 0 <= ordinal < 2**31:
        raise (TypeError if type(ordinal) is not int else ValueError)(
            f"ordinal: expected a device number 0..2**31-1, got {ordinal!r}")
    lib = _lib.load()
    name = ctypes.create_string_buffer(256)
    sm = ctypes.c_int()
    lib.check(lib.fn["kvjit_device_info"](ordinal, name, len(name), ctypes.byref(sm)))
    return name.value.decode(errors="replace"), sm.value


def current_sm():
    """Compute capability of the current CUDA context's device (else device 0)."""
    return _int_result("kvjit_current_sm")


def parse_arch(text):
    """"sm_90", "90" or "9.0" -> 90 (what ops build); InvalidArgumentError otherwise, also for
    loader targets such as "sm_90a" (see parse_target)."""
    return _int_result("kvjit_parse_arch", _text(text, "text"))


def parse_target(text):
    """"sm_90" -> 90, "sm_90a" / "sm_100f" / "compute_90" -> a target code (kvjit_parse_target):
    the compute capability or'ed with TARGET_ARCH_SPECIFIC, TARGET_FAMILY or TARGET_PTX."""
    return _int_result("kvjit_parse_target", _text(text, "text"))


def target_name(target):
    """The spelling of a target code: 90 | TARGET_ARCH_SPECIFIC -> "sm_90a"."""
    if not isinstance(target, int) or isinstance(target, bool):
        raise TypeError(f"target: expected an int, got {type(target).__name__}")
    if not -2**31 <= target < 2**31:
        raise ValueError(f"target: {target} is not a target code")
    lib = _lib.load()
    buf = ctypes.create_string_buffer(32)
    lib.check(lib.fn["kvjit_target_name"](target, buf, len(buf)))
    return buf.value.decode()
