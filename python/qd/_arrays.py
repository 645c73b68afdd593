"""NumPy arrays, PyTorch tensors and DLPack tensors as qd buffers, in place.

A host array is borrowed (qd_buffer_borrow): launches read and write its
memory directly. A CUDA tensor is borrowed as device memory of the backend
(qd_buffer_borrow_device). Anything else with __dlpack__ goes through
qd_buffer_from_dlpack. Arrays must be contiguous and of one of qd's element
types; anything else raises qd.Error before a launch.
"""
import ctypes
import sys
import threading
import weakref

from ._lib import Error, check, lib

I1, I32, I64, F32, F64 = range(5)
DTYPE_NAMES = ("i1", "i32", "i64", "f32", "f64")
_TORCH = {"torch.bool": I1, "torch.int32": I32, "torch.int64": I64, "torch.float32": F32,
          "torch.float64": F64}
_ACCEPTED = "float32, float64, int32, int64 or bool"

_pythonapi = ctypes.pythonapi
_pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pythonapi.PyCapsule_SetName.restype = ctypes.c_int
_pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _shape(dims):
    n = len(dims)
    return n, (ctypes.c_int64 * n)(*dims) if n else None


def _new(call, *args):
    out = ctypes.c_void_p()
    check(call(*args, ctypes.byref(out)))
    return out.value


def _borrow_host(what, dtype, dims, pointer):
    n, shape = _shape(dims)
    return _new(lib.qd_buffer_borrow, dtype, n, shape, ctypes.c_void_p(pointer))


def _numpy_types():
    try:
        import numpy as np
    except ImportError:
        return {}
    return {np.dtype(n).num: code for n, code in
            (("bool", I1), ("int32", I32), ("int64", I64), ("float32", F32), ("float64", F64))}


_NUMPY = _numpy_types()
try:
    from numpy import ndarray as _ndarray
except ImportError:
    _ndarray = None


def _numpy(what, a):
    dtype = _NUMPY.get(a.dtype.num)
    if dtype is None:
        raise Error(f"{what}: a NumPy array of dtype {a.dtype.name}; qd takes {_ACCEPTED} "
                    "(convert it with .astype)", 3)
    if not a.flags.c_contiguous:
        raise Error(f"{what}: the NumPy array is not contiguous (strides {a.strides}); pass "
                    "np.ascontiguousarray(a)", 3)
    if not a.flags.writeable:
        raise Error(f"{what}: the NumPy array is read-only, and a kernel may write its "
                    "ndarray arguments; pass a writeable copy (a.copy())", 3)
    return _borrow_host(what, dtype, a.shape, a.__array_interface__["data"][0])


def _torch(what, t, backend):
    dtype = _TORCH.get(str(t.dtype))
    if dtype is None:
        raise Error(f"{what}: a tensor of dtype {t.dtype}; qd takes {_ACCEPTED} "
                    "(convert it with .to)", 3)
    if not t.is_contiguous():
        raise Error(f"{what}: the tensor is not contiguous (strides {tuple(t.stride())}); "
                    "pass t.contiguous()", 3)
    device = t.device.type
    if device == "cpu":
        return _borrow_host(what, dtype, t.shape, t.data_ptr())
    if device == "cuda":
        if backend is None or backend.name not in ("cuda", "amdgpu"):
            name = backend.name if backend is not None else "none"
            raise Error(f"{what}: the tensor is on {t.device} but the backend is '{name}'; "
                        "launch on qd.backend('cuda') or move the tensor with .cpu()", 9)
        n, shape = _shape(t.shape)
        return _new(lib.qd_buffer_borrow_device, backend.handle, dtype, n, shape,
                    ctypes.c_uint64(t.data_ptr()))
    raise Error(f"{what}: the tensor is on device '{device}'; qd takes CPU and CUDA tensors", 9)


def _dlpack(what, value, backend):
    capsule = value.__dlpack__()
    pointer = _pythonapi.PyCapsule_GetPointer(capsule, b"dltensor")
    handle = _new(lib.qd_buffer_from_dlpack, ctypes.c_void_p(pointer),
                  backend.handle if backend is not None else None)
    # The buffer owns the tensor now; the capsule must not delete it too.
    _pythonapi.PyCapsule_SetName(capsule, b"used_dltensor")
    return handle


def borrow(what, value, backend=None):
    """A new qd_buffer handle over `value`'s memory (the caller frees it), checked."""
    module = type(value).__module__
    if module == "numpy":
        return _numpy(what, value)
    if module.startswith("torch") and "torch" in sys.modules:
        return _torch(what, value, backend)
    if hasattr(value, "__dlpack__"):
        return _dlpack(what, value, backend)
    raise Error(f"{what}: a {type(value).__name__} is no array; pass a NumPy array, a PyTorch "
                "tensor, a DLPack tensor or a qd.Buffer", 3)


class BufferCache:
    """The buffers launches borrow, kept while their arrays live, so that a loop launching a
    kernel on the same arrays creates none after the first launch. A borrowed buffer is only
    (address, shape, element type): one made again for the same memory is the same buffer.
    NumPy arrays are looked up by identity (a weak reference evicts the entry when the array
    dies), tensors by address, shape, type and backend (their storage may move: resize_)."""

    _LIMIT = 256

    def __init__(self):
        self._arrays = {}
        self._tensors = {}
        self._lock = threading.Lock()

    def handle(self, describe, value, backend):
        """(handle, owned): a buffer over `value`; `owned` when the caller frees it.
        `describe()` names the value in errors."""
        cls = type(value)
        if cls is _ndarray:
            entry = self._arrays.get(id(value))
            if entry is not None and entry[0]() is value and entry[1] == value.shape and \
                    entry[2] == value.dtype.num and value.flags.c_contiguous and \
                    value.flags.writeable:
                return entry[3], False
            return self._array(describe(), value), False
        if cls.__module__.startswith("torch") and hasattr(value, "data_ptr"):
            return self._tensor(describe, value, backend), False
        return borrow(describe(), value, backend), True

    def _array(self, what, a):
        handle = _numpy(what, a)
        key = id(a)
        ref = weakref.ref(a, lambda _, key=key: self._evict(key))
        self._store(self._arrays, key, (ref, a.shape, a.dtype.num, handle))
        return handle

    def _evict(self, key):
        with self._lock:
            entry = self._arrays.pop(key, None)
        if entry is not None and lib is not None:
            lib.qd_buffer_free(entry[3])

    def _tensor(self, describe, t, backend):
        if not t.is_contiguous():
            return _torch(describe(), t, backend)  # raises
        key = (t.data_ptr(), t.shape, t.dtype, t.is_cuda and id(backend))
        entry = self._tensors.get(key)
        if entry is not None:
            return entry
        handle = _torch(describe(), t, backend)
        if len(self._tensors) >= self._LIMIT:
            with self._lock:
                old, self._tensors = self._tensors, {}
            for h in old.values():
                lib.qd_buffer_free(h)
        self._store(self._tensors, key, handle)
        return handle

    def _store(self, table, key, entry):
        with self._lock:
            old = table.get(key)
            table[key] = entry
        if old is not None:
            lib.qd_buffer_free(old[3] if isinstance(old, tuple) else old)


cache = BufferCache()
