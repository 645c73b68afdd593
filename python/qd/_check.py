"""qd.check_gradient over qd_check_gradient (include/qd-c/Check.h)."""
import ctypes

from ._lib import CheckValue, check, lib, take_string


def _value(name, value, is_field, keep):
    try:
        import numpy as np
        array = np.asarray(value, dtype=np.float64)
        shape, flat = array.shape, array.ravel().tolist()
    except ImportError:  # numbers and nested lists without NumPy
        shape, flat = (), [float(value)]
    dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    values = (ctypes.c_double * max(1, len(flat)))(*flat)
    keep += [dims, values]
    return CheckValue(name.encode(), int(is_field), len(shape), dims, values)


def check_gradient(module, kernel, backend, rtol, atol, max_elements, seed, reverse, forward,
                   fields, args):
    keep = []
    values = [_value(n, v, False, keep) for n, v in args.items()]
    values += [_value(n, v, True, keep) for n, v in fields.items()]
    array = (CheckValue * len(values))(*values)
    options = lib.qd_check_options_default()
    options.rtol, options.atol = rtol, atol
    options.max_elements, options.seed = max_elements, seed
    options.reverse, options.forward = int(reverse), int(forward)
    passed, report = ctypes.c_int(), ctypes.c_void_p()
    check(lib.qd_check_gradient(module.handle, kernel.encode(), len(values), array,
                                ctypes.byref(options), backend.handle if backend else None,
                                ctypes.byref(passed), ctypes.byref(report)))
    return bool(passed.value), take_string(report.value)
