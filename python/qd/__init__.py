"""qd from Python: parse kernels, differentiate them, run them on a backend
with NumPy arrays and PyTorch tensors used in place (docs/python.md).

    import qd, numpy as np
    module = qd.Module.parse(text)
    grad = module.gradient("k")               # "k_grad"
    cpu = qd.backend("cpu")
    k = module.kernel("k", cpu)
    k(x=np.ones(4, np.float32), y=np.zeros(4, np.float32), a=2.0)

Built on libqd-c with ctypes: nothing is compiled against Python. Errors
are qd.Error carrying qd's message.
"""
import ctypes
import struct

from . import _arrays
from ._arrays import DTYPE_NAMES
from ._lib import ARG_FLOAT, ARG_INT, ARG_NDARRAY, LAUNCH_ASYNC, LAUNCH_BOUNDS_CHECKED, Arg, \
    ArgInfo, Error, LaunchOptionsC, Seed, TapeMemory, TapeOptions, TapeSeed, check, lib, \
    take_string

__all__ = ["Error", "Module", "Backend", "Program", "Kernel", "Ndarray", "Buffer", "Tape",
           "LaunchOptions", "backend", "backends", "version", "check_gradient"]

_GRAD, _DUAL = 1, 2


def version():
    """The version of the loaded libqd-c ("0.3.0")."""
    return lib.qd_version().decode()


def backends():
    """The backends of the loaded libqd-c: ["interp", "cpu", ...]."""
    return take_string(lib.qd_backend_names()).split()


def _out(call, *args):
    out = ctypes.c_void_p()
    check(call(*args, ctypes.byref(out)))
    return out.value


def _string(call, *args):
    out = ctypes.c_void_p()
    check(call(*args, ctypes.byref(out)))
    return take_string(out.value)


class _Handle:
    """Owns a C handle and frees it once."""
    _free = None

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        if getattr(self, "handle", None):
            type(self)._free(self.handle)
            self.handle = None


class ArgumentInfo:
    """A kernel argument: name, is_ndarray, dtype ("f32"), rank, has_grad, has_dual."""

    def __init__(self, info):
        self.name = info.name.decode()
        self.is_ndarray = bool(info.is_ndarray)
        self.dtype = DTYPE_NAMES[info.dtype]
        self.rank = info.rank
        self.has_grad = bool(info.has_grad)
        self.has_dual = bool(info.has_dual)

    def __repr__(self):
        kind = f"ndarray<{self.dtype}, {self.rank}>" if self.is_ndarray else self.dtype
        return f"%{self.name}: {kind}"


def _kernel_args(kernel_handle):
    args = []
    for i in range(lib.qd_kernel_num_args(kernel_handle)):
        info = ArgInfo()
        check(lib.qd_kernel_arg(kernel_handle, i, ctypes.byref(info)))
        args.append(ArgumentInfo(info))
    return args


class Module(_Handle):
    """A module of fields and kernels (docs/ir.md)."""
    _free = lib.qd_module_free

    def __init__(self, handle):
        super().__init__(handle)
        self._programs = {}

    @classmethod
    def parse(cls, text, filename="<string>"):
        """Parses the text format; errors carry filename:line:col."""
        return cls(_out(lib.qd_module_parse, text.encode(), filename.encode()))

    def __str__(self):
        return _string(lib.qd_module_print, self.handle)

    def verify(self):
        check(lib.qd_module_verify(self.handle))

    def run_passes(self, pipeline, verify_each=True):
        """Runs a pass pipeline ("fold,dce", docs/passes.md)."""
        check(lib.qd_module_run_passes(self.handle, pipeline.encode(), int(verify_each)))

    @property
    def kernels(self):
        """The names of the module's kernels."""
        n = lib.qd_module_num_kernels(self.handle)
        return [lib.qd_kernel_name(lib.qd_module_kernel(self.handle, i)).decode()
                for i in range(n)]

    def _kernel_handle(self, name):
        return _out(lib.qd_module_find_kernel, self.handle, name.encode())

    def arguments(self, name):
        """The arguments of kernel `name`, as ArgumentInfo."""
        return _kernel_args(self._kernel_handle(name))

    def gradient(self, name, grad_name=None, tape_nested_loops=True, tape_factors=True):
        """Adds the reverse-mode gradient kernel of `name` and returns its name."""
        flags = (0 if tape_nested_loops else 1) | (0 if tape_factors else 2)
        handle = _out(lib.qd_module_gradient, self.handle, name.encode(),
                      grad_name.encode() if grad_name else None, flags)
        return lib.qd_kernel_name(handle).decode()

    def forward(self, name, dual_name=None):
        """Adds the forward-mode (dual) kernel of `name` and returns its name."""
        handle = _out(lib.qd_module_forward, self.handle, name.encode(),
                      dual_name.encode() if dual_name else None)
        return lib.qd_kernel_name(handle).decode()

    def gradient_adjoints(self, grad_name):
        """(accumulated, consumed): the adjoints a gradient kernel adds into and reads, as
        names ("%x", "@y")."""
        acc, con = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib.qd_kernel_gradient_adjoints(self._kernel_handle(grad_name), ctypes.byref(acc),
                                              ctypes.byref(con)))
        return take_string(acc.value).split(), take_string(con.value).split()

    def program(self, backend):
        """This module's program for `backend` (one per backend, made once)."""
        key = id(backend)
        if key not in self._programs:
            self._programs[key] = (backend, Program(self, backend))
        return self._programs[key][1]

    def kernel(self, name, backend):
        """Kernel `name`, launched on `backend` by calling it (see Program.kernel)."""
        return self.program(backend).kernel(name)


class Backend(_Handle):
    """A backend by name (docs/runtime.md); see qd.backend."""
    _free = lib.qd_backend_free

    def __init__(self, name, **options):
        text = ",".join(f"{k}={_option(v)}" for k, v in options.items())
        super().__init__(_out(lib.qd_backend_create, name.encode(), text.encode()))
        self.name = name

    def sizing_report(self, module, kernel):
        """The adstack sizing report of `kernel` (docs/sizing.md)."""
        return _string(lib.qd_backend_sizing_report, self.handle, module._kernel_handle(kernel))

    def synchronize(self):
        """Waits for the backend's asynchronous launches and raises the first error one of
        them reported (its own message, marked as reported late)."""
        check(lib.qd_backend_synchronize(self.handle))

    def __repr__(self):
        return f"qd.backend({self.name!r})"


def _option(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def backend(name, **options):
    """Creates backend `name` ("cpu", "interp", "cuda", "vulkan", "amdgpu") with options
    (threads=4); qd.Error says what is missing where a device or driver is."""
    return Backend(name, **options)


class Buffer(_Handle):
    """An array qd owns (zeroed), or a program's field; `.numpy()` views its memory."""
    _free = lib.qd_buffer_free

    def __init__(self, handle, keep=None):
        super().__init__(handle)
        self._keep = keep  # what the memory belongs to

    @classmethod
    def zeros(cls, shape, dtype="f32"):
        dims = tuple(shape)
        array = (ctypes.c_int64 * len(dims))(*dims) if dims else None
        return cls(_out(lib.qd_buffer_create, DTYPE_NAMES.index(dtype), len(dims), array))

    @classmethod
    def borrow(cls, array, backend=None):
        """A buffer over a NumPy array's or tensor's memory (kept alive with it)."""
        return cls(_arrays.borrow("qd.Buffer.borrow", array, backend), keep=array)

    def free(self):
        """Frees the handle now; using the buffer afterwards raises qd.Error."""
        lib.qd_buffer_free(self.handle)

    @property
    def dtype(self):
        out = ctypes.c_int()
        check(lib.qd_buffer_dtype(self.handle, ctypes.byref(out)))
        return DTYPE_NAMES[out.value]

    @property
    def shape(self):
        ndim, dims = ctypes.c_int(), (ctypes.c_int64 * 8)()
        check(lib.qd_buffer_shape(self.handle, ctypes.byref(ndim), dims, 8))
        return tuple(dims[:ndim.value])

    @property
    def data_ptr(self):
        """The address of its host memory (a borrowed array's own)."""
        out = ctypes.c_void_p()
        check(lib.qd_buffer_data(self.handle, ctypes.byref(out)))
        return out.value or 0

    def numpy(self):
        """A NumPy view of the host memory (valid while the buffer lives)."""
        import numpy as np
        dtype = {"i1": np.bool_, "i32": np.int32, "i64": np.int64, "f32": np.float32,
                 "f64": np.float64}[self.dtype]
        shape = self.shape
        n = 1
        for d in shape:
            n *= d
        if n == 0:
            return np.zeros(shape, dtype)
        raw = (ctypes.c_byte * (n * np.dtype(dtype).itemsize)).from_address(self.data_ptr)
        raw._qd_owner = self  # the view keeps `raw`, which keeps the buffer
        return np.frombuffer(raw, dtype).reshape(shape)


class LaunchOptions:
    """Options of one launch, passed before the kernel's arguments (positionally, so that
    no kernel argument name collides with them): k(qd.LaunchOptions(bounds_checked=True),
    x=..., seeds=...).

    bounds_checked: out-of-range indices are errors naming the statement.
    stream: the stream the launch goes on, after the work queued there: a
      torch.cuda.Stream (or anything with .cuda_stream) or a raw CUstream/hipStream_t
      handle (0: the backend's own). None: for CUDA tensors on a GPU backend, PyTorch's
      current stream of their device; else the backend's own.
    asynchronous: return without waiting for the kernels (GPU backends); errors they report
      are raised by the next call that waits (Backend.synchronize, or a synchronous
      launch). None: asynchronous when the launch has a stream (CUDA tensors, or one given).
    timeout: seconds after which the launch stops (None: no limit); such a launch waits.
    default_adstack_capacity, optimistic_adstacks (None: the backend's choice),
    optimistic_initial_capacity, size_adstacks: adstack sizing (docs/sizing.md).
    adstack_memory_budget: the most adstack heap a launch may lay out, bytes (0: the
      default); refine_adstacks_above_bytes: static adstack bounds holding at most this
      many bytes run unmeasured (None: the library's default, 1 MiB; 0: always measure).
    """

    __slots__ = ("bounds_checked", "stream", "asynchronous", "timeout",
                 "default_adstack_capacity", "optimistic_adstacks",
                 "optimistic_initial_capacity", "size_adstacks", "adstack_memory_budget",
                 "refine_adstacks_above_bytes")

    def __init__(self, bounds_checked=False, stream=None, asynchronous=None, timeout=None,
                 default_adstack_capacity=0, optimistic_adstacks=None,
                 optimistic_initial_capacity=0, size_adstacks=True, adstack_memory_budget=0,
                 refine_adstacks_above_bytes=None):
        self.bounds_checked, self.stream, self.asynchronous = bounds_checked, stream, asynchronous
        self.timeout, self.default_adstack_capacity = timeout, default_adstack_capacity
        self.optimistic_adstacks = optimistic_adstacks
        self.optimistic_initial_capacity = optimistic_initial_capacity
        self.size_adstacks = size_adstacks
        self.adstack_memory_budget = adstack_memory_budget
        self.refine_adstacks_above_bytes = refine_adstacks_above_bytes

    def _c(self, device):
        """The qd_launch_options of a launch whose CUDA tensors are on torch `device` (None:
        it has none)."""
        c = lib.qd_launch_options_default()
        stream = self.stream
        if stream is None and device is not None:
            import torch
            stream = torch.cuda.current_stream(device).cuda_stream
        stream = getattr(stream, "cuda_stream", stream)
        asynchronous = self.asynchronous
        if asynchronous is None:
            asynchronous = stream is not None
        c.flags = (LAUNCH_BOUNDS_CHECKED if self.bounds_checked else 0) | \
            (LAUNCH_ASYNC if asynchronous else 0)
        c.stream = stream or None
        c.timeout_ns = 0 if self.timeout is None else max(1, int(self.timeout * 1e9))
        c.default_adstack_capacity = self.default_adstack_capacity
        c.optimistic_initial_capacity = self.optimistic_initial_capacity
        c.optimistic_adstacks = -1 if self.optimistic_adstacks is None else \
            int(bool(self.optimistic_adstacks))
        c.size_adstacks = int(bool(self.size_adstacks))
        c.adstack_memory_budget = self.adstack_memory_budget
        if self.refine_adstacks_above_bytes is not None:
            c.refine_adstacks_above_bytes = self.refine_adstacks_above_bytes
        return c


_DEFAULT_OPTIONS = LaunchOptions()


def _launch_options(what, options, device):
    """A pointer to the qd_launch_options of `options` (None: the defaults) for a launch
    whose CUDA tensors are on `device`, or None for the C API's defaults."""
    if options is None:
        if device is None:
            return None
        options = _DEFAULT_OPTIONS
    elif not isinstance(options, LaunchOptions):
        raise Error(f"{what}: launch options must be a qd.LaunchOptions, not a "
                    f"{type(options).__name__}; pass kernel arguments by name", 3)
    return ctypes.byref(options._c(device))


def _option_hint(kernel, error, args):
    """`error` with a hint where a keyword that used to be a launch option was given."""
    old = [n for n in ("bounds_checked", "seeds") if n in args and
           n not in {a.name for a in kernel.arguments}]
    if not old:
        return error
    return Error(f"{error} (launch options are no keyword arguments: pass "
                 f"qd.LaunchOptions({old[0]}=...) before the kernel's arguments)", error.code)


class Ndarray:
    """An ndarray argument with companions: Ndarray(x, grad=x_grad, dual=None)."""

    def __init__(self, primal, grad=None, dual=None):
        self.primal, self.grad, self.dual = primal, grad, dual


class Program(_Handle):
    """A module's field storage on one backend; kernels launch on it."""
    _free = lib.qd_program_free

    def __init__(self, module, backend):
        super().__init__(_out(lib.qd_program_create, module.handle))
        self.module, self.backend = module, backend

    def field(self, name, component="primal"):
        """Field `name`'s storage ("primal", "grad" or "dual") as a qd.Buffer."""
        c = ("primal", "grad", "dual").index(component)
        return Buffer(_out(lib.qd_program_field, self.handle, name.encode(), c), keep=self)

    def kernel(self, name):
        return Kernel(self, name)

    def launch_with_gradient(self, forward, gradient, seeds, options=None, /, **args):
        """Launches `forward`, then `gradient` with the same arguments, after zeroing the
        adjoints the gradient adds into and seeding those it reads ({"loss": 1.0}); `options`
        a qd.LaunchOptions."""
        seed_array = (Seed * len(seeds))(*[Seed(k.encode(), float(v)) for k, v in seeds.items()])
        kernel = self.kernel(forward)
        packed, owned, device = _pack(kernel, args)
        try:
            c = _launch_options("launch_with_gradient", options, device)
            check(_launch_with_gradient(self.handle, self.backend.handle, kernel._name,
                                        gradient.encode(), len(args), packed, len(seeds),
                                        seed_array, c))
        finally:
            for handle in owned:
                lib.qd_buffer_free(handle)


class Kernel:
    """Kernel `name` of a program: call it with its arguments by name. Arrays are used in
    place; a scalar is a Python int or float."""

    def __init__(self, program, name):
        self.program = program
        self.name = name
        self._name = name.encode()
        self.arguments = _kernel_args(program.module._kernel_handle(name))
        self._scalars = {a.name: a.dtype for a in self.arguments if not a.is_ndarray}
        self._names = {}  # argument name -> (its bytes, kept alive, and their address)
        for a in self.arguments:
            self._name_address(a.name)

    def __call__(self, options=None, /, **args):
        """Launches the kernel with `args` by name; `options` a qd.LaunchOptions (CUDA
        tensors: asynchronous on PyTorch's current stream by default)."""
        packed, owned, device = _pack(self, args)
        try:
            c = None if options is None and device is None else \
                _launch_options(f"kernel @{self.name}", options, device)
            check(_launch(self.program.handle, self.program.backend.handle, self._name,
                          len(args), packed, c))
        except Error as e:
            raise _option_hint(self, e, args) from None
        finally:
            for handle in owned:
                lib.qd_buffer_free(handle)

    def _name_address(self, name):
        entry = self._names.get(name)
        if entry is None:
            data = name.encode()
            entry = (data, ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value)
            if len(self._names) < 1024:  # names the kernel does not take are an error anyway
                self._names[name] = entry
        return entry

    def __repr__(self):
        return f"@{self.name}({', '.join(map(repr, self.arguments))})"


class Tape(_Handle):
    """A launch tape (docs/python.md, "Launch tapes"): records launches on one program and
    backend and runs their gradients backward, or their tangents forward (jvp).

        tape = qd.Tape(module, cpu)               # or qd.Tape(program), qd.Tape(kernel)
        tape.launch("step", src=qd.Ndarray(a, grad=a_grad), dst=..., c=0.5)
        tape.backward({"loss": 1.0})              # a_grad = dloss/da
    """
    _free = lib.qd_tape_free

    def __init__(self, source, backend=None, snapshots=True, checkpoint_budget=0,
                 keep_initial_state=False, check_unchanged=True, bounds_checked=False):
        if isinstance(source, Kernel):
            source = source.program
        if isinstance(source, Module):
            if backend is None:
                raise Error("qd.Tape: a module needs a backend (qd.Tape(module, backend))", 3)
            source = source.program(backend)
        if not isinstance(source, Program):
            raise Error(f"qd.Tape: a {type(source).__name__} is no qd.Program, qd.Module or "
                        "qd.Kernel", 3)
        if backend is not None and backend is not source.backend:
            raise Error(f"qd.Tape: the program runs on {source.backend!r}, not {backend!r}", 3)
        options = TapeOptions(int(snapshots), int(checkpoint_budget), int(keep_initial_state),
                              int(check_unchanged), int(bounds_checked))
        super().__init__(_out(lib.qd_tape_create, source.handle, source.backend.handle,
                              ctypes.byref(options)))
        self.program = source  # the backend and the arrays must outlive the C tape
        self._kernels, self._arrays = {}, []

    def launch(self, kernel, /, **args):
        """Runs kernel `kernel` with `args` (as a Kernel call takes them) and records it. The
        tape keeps the arrays: pass the same array object for the same state in every launch."""
        k = self._kernels.get(kernel)
        if k is None:
            k = self._kernels[kernel] = self.program.kernel(kernel)
        packed, owned, _ = _pack(k, args)
        try:
            check(_tape_launch(self.handle, k._name, len(args), packed))
        finally:
            for handle in owned:
                lib.qd_buffer_free(handle)
        self._arrays.append(args)

    def backward(self, seeds, zero_adjoints=True):
        """Runs the recorded gradients in reverse order with the adjoints `seeds` set: a dict
        {"field": value} or pairs (field name or grad array, value); a value is a number or
        one value per element."""
        array, keep = self._seeds("qd.Tape.backward", seeds)
        check(lib.qd_tape_backward(self.handle, len(array), array, int(zero_adjoints)))

    def jvp(self, tangents):
        """Forward mode from the state the tape started from (keep_initial_state=True or a
        checkpoint budget): `tangents` as backward's seeds, naming dual arrays."""
        array, keep = self._seeds("qd.Tape.jvp", tangents)
        check(lib.qd_tape_jvp(self.handle, len(array), array))

    def memory(self):
        """{"held_bytes", "peak_bytes", "checkpoint_interval", "checkpoints",
        "adstack_heap_bytes", "adstack_heap_threads"}: the last two describe the backend's last
        launch (None for a backend without an adstack heap, the interpreter)."""
        out = TapeMemory()
        check(lib.qd_tape_memory_report(self.handle, ctypes.byref(out)))
        report = {name: getattr(out, name) for name, _ in TapeMemory._fields_}
        heap, threads = ctypes.c_int64(), ctypes.c_int64()
        check(lib.qd_tape_adstack_heap(self.handle, ctypes.byref(heap), ctypes.byref(threads)))
        report["adstack_heap_bytes"] = heap.value if heap.value >= 0 else None
        report["adstack_heap_threads"] = threads.value if threads.value >= 0 else None
        return report

    def __len__(self):
        out = ctypes.c_size_t()
        check(lib.qd_tape_size(self.handle, ctypes.byref(out)))
        return out.value

    def clear(self):
        """Forgets every launch and copy (the arrays keep their contents)."""
        check(lib.qd_tape_clear(self.handle))
        self._arrays = []

    def _seeds(self, what, seeds):
        items = list(seeds.items() if isinstance(seeds, dict) else seeds)
        array, keep = (TapeSeed * len(items))(), []
        for i, (target, value) in enumerate(items):
            seed = array[i]
            if isinstance(target, str):
                seed.field = target.encode()
            else:
                seed.buffer = _handle_of(f"{what}: seed {i}", target, self.program.backend, keep)
            if isinstance(value, (int, float)):
                seed.value = float(value)
            else:
                flat = [float(v) for v in getattr(value, "flat", value)]
                values = (ctypes.c_double * len(flat))(*flat)
                seed.values, seed.nvalues = values, len(flat)
                keep.append(values)
            keep.append(target)
        return array, keep  # `keep` holds the handles made here while the call runs


def _handle_of(what, value, backend, keep):
    """A buffer handle over `value` (a qd.Buffer or an array) that lives while `keep` does."""
    if type(value) is Buffer:
        return value.handle or 0
    handle, mine = _arrays.cache.handle(lambda: what, value, backend)
    if mine:
        keep.append(Buffer(handle))
    return handle


# qd_program_launch_with_options and qd_program_launch_with_gradient_options taking the
# qd_arg array as bytes that _pack laid out (a qd_arg is {char *, int, double, int64_t,
# 3 handles}: 56 bytes) and the options as a pointer (None: the defaults).
_launch = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                           ctypes.c_size_t, ctypes.c_char_p,
                           ctypes.c_void_p)(("qd_program_launch_with_options", lib))
_launch_with_gradient = ctypes.CFUNCTYPE(
    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
    ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Seed),
    ctypes.c_void_p)(("qd_program_launch_with_gradient_options", lib))
_tape_launch = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                               ctypes.c_size_t, ctypes.c_char_p)(("qd_tape_launch", lib))
_LAYOUTS = {}


def _layout(n):
    layout = _LAYOUTS.get(n)
    if layout is None:
        layout = _LAYOUTS[n] = struct.Struct("@" + "PidqPPP" * n)
        assert layout.size == n * ctypes.sizeof(Arg)
    return layout


def _pack(kernel, values):
    """The qd_arg array of a launch of `kernel` with `values` as bytes, the buffer handles
    made for this launch alone (the caller frees them) and the torch device of its first CUDA
    tensor on a GPU backend (None: it has none)."""
    fields, owned = [], []
    backend = kernel.program.backend
    device = None
    gpu = backend.name in _GPU_BACKENDS
    try:
        for name, value in values.items():
            address = kernel._name_address(name)[1]
            kind = type(value)
            if kind is float:
                fields += (address, ARG_FLOAT, value, 0, 0, 0, 0)
            elif kind is int or kind is bool:
                fields += (address, ARG_INT, 0.0, int(value), 0, 0, 0)
            elif kind is Ndarray:
                if gpu and device is None:
                    device = _cuda_device(value.primal)
                fields += (address, ARG_NDARRAY, 0.0, 0,
                           _handle(kernel, name, value.primal, backend, owned),
                           _handle(kernel, name + ".grad", value.grad, backend, owned),
                           _handle(kernel, name + ".dual", value.dual, backend, owned))
            elif isinstance(value, (int, float)) or (kind.__module__ == "numpy" and
                                                     getattr(value, "shape", None) == ()):
                item = value.item() if hasattr(value, "item") else value
                integral = isinstance(item, int)
                fields += (address, ARG_INT if integral else ARG_FLOAT,
                           0.0 if integral else float(item), int(item) if integral else 0,
                           0, 0, 0)
            elif name in kernel._scalars:
                raise Error(f"kernel @{kernel.name}: argument %{name} is a scalar "
                            f"{kernel._scalars[name]}; pass a number, not a value of type "
                            f"{type(value).__name__}", 3)
            else:
                if gpu and device is None:
                    device = _cuda_device(value)
                fields += (address, ARG_NDARRAY, 0.0, 0,
                           _handle(kernel, name, value, backend, owned), 0, 0)
    except BaseException:
        for handle in owned:
            lib.qd_buffer_free(handle)
        raise
    return _layout(len(values)).pack(*fields), owned, device


_GPU_BACKENDS = ("cuda", "amdgpu")


def _cuda_device(value):
    """The torch device of a CUDA tensor, else None."""
    return value.device if getattr(value, "is_cuda", False) else None


def _handle(kernel, what, value, backend, owned):
    if value is None:
        return 0
    if type(value) is Buffer:
        return value.handle or 0
    handle, mine = _arrays.cache.handle(lambda: f"kernel @{kernel.name}: argument %{what}",
                                        value, backend)
    if mine:
        owned.append(handle)
    return handle


def check_gradient(module, kernel, backend=None, rtol=0.0, atol=0.0, max_elements=64, seed=0,
                   reverse=True, forward=True, fields=None, **args):
    """Checks kernel's reverse- and forward-mode derivatives against finite differences
    (docs/autodiff.md) with argument values `args` and initial field contents `fields`
    (NumPy arrays or numbers). Returns (passed, report)."""
    from ._check import check_gradient as run
    return run(module, kernel, backend, rtol, atol, max_elements, seed, reverse, forward,
               fields or {}, args)
