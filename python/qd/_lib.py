"""Loads libqd-c and declares its functions to ctypes (include/qd-c).

The library is looked for, in order: at $QD_C_LIBRARY (a file), in
$QD_LIBRARY_DIR, next to this package (an installed prefix puts the package
in <prefix>/lib/python/qd and the library in <prefix>/lib), and in the build
tree of a source checkout ($QD_BUILD_DIR, default <checkout>/build).
"""
import ctypes
import os

_NAMES = ("libqd-c.so", "libqd-c.dylib", "qd-c.dll")


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("QD_C_LIBRARY"):
        yield os.environ["QD_C_LIBRARY"]
    dirs = []
    if os.environ.get("QD_LIBRARY_DIR"):
        dirs.append(os.environ["QD_LIBRARY_DIR"])
    dirs += [here, os.path.join(here, "..", "..")]
    checkout = os.path.join(here, "..", "..")
    build = os.environ.get("QD_BUILD_DIR", os.path.join(checkout, "build"))
    dirs.append(os.path.join(build, "lib", "capi"))
    for d in dirs:
        for name in _NAMES:
            yield os.path.normpath(os.path.join(d, name))


def _load():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            return ctypes.CDLL(path)
        tried.append(path)
    raise ImportError(
        "qd: libqd-c was not found; build it (ninja -C build qd_c) or set QD_C_LIBRARY to its "
        "path. Looked at: " + ", ".join(tried))


lib = _load()

c_status = ctypes.c_void_p
c_handle = ctypes.c_void_p
c_str = ctypes.c_char_p


class ArgInfo(ctypes.Structure):
    _fields_ = [("name", c_str), ("is_ndarray", ctypes.c_int), ("dtype", ctypes.c_int),
                ("rank", ctypes.c_int), ("has_grad", ctypes.c_int), ("has_dual", ctypes.c_int)]


class Arg(ctypes.Structure):
    _fields_ = [("name", c_str), ("kind", ctypes.c_int), ("f", ctypes.c_double),
                ("i", ctypes.c_int64), ("primal", c_handle), ("grad", c_handle),
                ("dual", c_handle)]


class Seed(ctypes.Structure):
    _fields_ = [("name", c_str), ("value", ctypes.c_double)]


class TapeOptions(ctypes.Structure):
    _fields_ = [("snapshots", ctypes.c_int), ("checkpoint_budget", ctypes.c_uint64),
                ("keep_initial_state", ctypes.c_int), ("check_unchanged", ctypes.c_int),
                ("launch_flags", ctypes.c_uint)]


class TapeSeed(ctypes.Structure):
    _fields_ = [("field", c_str), ("buffer", c_handle), ("value", ctypes.c_double),
                ("values", ctypes.POINTER(ctypes.c_double)), ("nvalues", ctypes.c_size_t)]


class TapeMemory(ctypes.Structure):
    _fields_ = [("held_bytes", ctypes.c_uint64), ("peak_bytes", ctypes.c_uint64),
                ("checkpoint_interval", ctypes.c_int64), ("checkpoints", ctypes.c_int64)]


class LaunchOptionsC(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("stream", ctypes.c_void_p), ("timeout_ns", ctypes.c_uint64),
                ("default_adstack_capacity", ctypes.c_int64),
                ("optimistic_initial_capacity", ctypes.c_int64),
                ("optimistic_adstacks", ctypes.c_int32), ("size_adstacks", ctypes.c_int32),
                ("adstack_memory_budget", ctypes.c_int64),
                ("refine_adstacks_above_bytes", ctypes.c_int64)]


LAUNCH_BOUNDS_CHECKED, LAUNCH_ASYNC = 1, 2


class CheckValue(ctypes.Structure):
    _fields_ = [("name", c_str), ("is_field", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("values", ctypes.POINTER(ctypes.c_double))]


class CheckOptions(ctypes.Structure):
    _fields_ = [("rtol", ctypes.c_double), ("atol", ctypes.c_double),
                ("max_elements", ctypes.c_int64), ("seed", ctypes.c_uint64),
                ("reverse", ctypes.c_int), ("forward", ctypes.c_int)]


ARG_NDARRAY, ARG_FLOAT, ARG_INT = 0, 1, 2
I64P = ctypes.POINTER(ctypes.c_int64)
OUT = ctypes.POINTER(c_handle)
STR_OUT = ctypes.POINTER(ctypes.c_void_p)

_SIGNATURES = {
    "qd_version": (c_str, []),
    "qd_status_get_code": (ctypes.c_int, [c_status]),
    "qd_status_message": (c_str, [c_status]),
    "qd_status_free": (None, [c_status]),
    "qd_string_free": (None, [ctypes.c_void_p]),
    "qd_module_parse": (c_status, [c_str, c_str, OUT]),
    "qd_module_create": (c_status, [OUT]),
    "qd_module_free": (None, [c_handle]),
    "qd_module_print": (c_status, [c_handle, STR_OUT]),
    "qd_module_verify": (c_status, [c_handle]),
    "qd_module_run_passes": (c_status, [c_handle, c_str, ctypes.c_int]),
    "qd_module_find_kernel": (c_status, [c_handle, c_str, OUT]),
    "qd_module_num_kernels": (ctypes.c_size_t, [c_handle]),
    "qd_module_kernel": (c_handle, [c_handle, ctypes.c_size_t]),
    "qd_kernel_name": (c_str, [c_handle]),
    "qd_kernel_num_args": (ctypes.c_size_t, [c_handle]),
    "qd_kernel_arg": (c_status, [c_handle, ctypes.c_size_t, ctypes.POINTER(ArgInfo)]),
    "qd_module_gradient": (c_status, [c_handle, c_str, c_str, ctypes.c_uint, OUT]),
    "qd_module_forward": (c_status, [c_handle, c_str, c_str, OUT]),
    "qd_kernel_gradient_adjoints": (c_status, [c_handle, STR_OUT, STR_OUT]),
    "qd_backend_names": (ctypes.c_void_p, []),
    "qd_backend_create": (c_status, [c_str, c_str, OUT]),
    "qd_backend_free": (None, [c_handle]),
    "qd_backend_name": (c_str, [c_handle]),
    "qd_backend_sizing_report": (c_status, [c_handle, c_handle, STR_OUT]),
    "qd_backend_synchronize": (c_status, [c_handle]),
    "qd_launch_options_default": (LaunchOptionsC, []),
    "qd_buffer_create": (c_status, [ctypes.c_int, ctypes.c_int, I64P, OUT]),
    "qd_buffer_borrow": (c_status, [ctypes.c_int, ctypes.c_int, I64P, ctypes.c_void_p, OUT]),
    "qd_buffer_borrow_device": (c_status, [c_handle, ctypes.c_int, ctypes.c_int, I64P,
                                           ctypes.c_uint64, OUT]),
    "qd_buffer_from_dlpack": (c_status, [ctypes.c_void_p, c_handle, OUT]),
    "qd_buffer_free": (None, [c_handle]),
    "qd_buffer_dtype": (c_status, [c_handle, ctypes.POINTER(ctypes.c_int)]),
    "qd_buffer_shape": (c_status, [c_handle, ctypes.POINTER(ctypes.c_int), I64P, ctypes.c_int]),
    "qd_buffer_data": (c_status, [c_handle, ctypes.POINTER(ctypes.c_void_p)]),
    "qd_program_create": (c_status, [c_handle, OUT]),
    "qd_program_free": (None, [c_handle]),
    "qd_program_field": (c_status, [c_handle, c_str, ctypes.c_int, OUT]),
    "qd_program_launch": (c_status, [c_handle, c_handle, c_str, ctypes.c_size_t,
                                     ctypes.POINTER(Arg), ctypes.c_uint]),
    "qd_program_launch_with_gradient": (c_status, [c_handle, c_handle, c_str, c_str,
                                                   ctypes.c_size_t, ctypes.POINTER(Arg),
                                                   ctypes.c_size_t, ctypes.POINTER(Seed),
                                                   ctypes.c_uint]),
    "qd_tape_create": (c_status, [c_handle, c_handle, ctypes.POINTER(TapeOptions), OUT]),
    "qd_tape_free": (None, [c_handle]),
    "qd_tape_backward": (c_status, [c_handle, ctypes.c_size_t, ctypes.POINTER(TapeSeed),
                                    ctypes.c_int]),
    "qd_tape_jvp": (c_status, [c_handle, ctypes.c_size_t, ctypes.POINTER(TapeSeed)]),
    "qd_tape_memory_report": (c_status, [c_handle, ctypes.POINTER(TapeMemory)]),
    "qd_tape_adstack_heap": (c_status, [c_handle, I64P, I64P]),
    "qd_tape_size": (c_status, [c_handle, ctypes.POINTER(ctypes.c_size_t)]),
    "qd_tape_clear": (c_status, [c_handle]),
    "qd_check_options_default": (CheckOptions, []),
    "qd_check_gradient": (c_status, [c_handle, c_str, ctypes.c_size_t,
                                     ctypes.POINTER(CheckValue), ctypes.POINTER(CheckOptions),
                                     c_handle, ctypes.POINTER(ctypes.c_int), STR_OUT]),
}

for _name, (_restype, _argtypes) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes


class Error(Exception):
    """An error qd reported; `code` is its qd_status_code (3: invalid argument, 5: not found,
    9: failed precondition, ...) and the message is qd's."""

    def __init__(self, message, code=2):
        super().__init__(message)
        self.code = code


Error.__module__ = "qd"


def check(status):
    """Raises the Error `status` carries (freeing it); does nothing for success."""
    if status:
        code = lib.qd_status_get_code(status)
        message = lib.qd_status_message(status).decode("utf-8", "replace")
        lib.qd_status_free(status)
        raise Error(message, code)


def take_string(pointer):
    """The text of a string qd returned, freeing it."""
    if not pointer:
        return ""
    try:
        return ctypes.string_at(pointer).decode("utf-8", "replace")
    finally:
        lib.qd_string_free(pointer)
