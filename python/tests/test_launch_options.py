"""qd.LaunchOptions: launch options passed positionally, so that kernel arguments of any
name (`seeds`, `bounds_checked`, `options`, `kernel`) are kernel arguments; streams refused
by backends without them; Backend.synchronize; the tape's adstack heap report."""
import os

import pytest

import qd

np = pytest.importorskip("numpy", reason="NumPy is not installed (Debian: python3-numpy)")

# The kernels (unittests/capi/launch-options.qd, shared with CApiLaunchOptionsTest):
# @names takes arguments named like launch options of releases before 0.2.
KERNELS = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "unittests",
                            "capi", "launch-options.qd")).read()


@pytest.fixture(params=["cpu", "interp"])
def backend(request):
    return qd.backend(request.param)


def test_arguments_named_like_launch_options(backend):
    k = qd.Module.parse(KERNELS).kernel("names", backend)
    seeds = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    k(seeds=seeds, bounds_checked=10, options=2.0, kernel=out)
    np.testing.assert_array_equal(out, 2 * seeds + 10)
    k(qd.LaunchOptions(bounds_checked=True), seeds=seeds, bounds_checked=1, options=3.0,
      kernel=out)
    np.testing.assert_array_equal(out, 3 * seeds + 1)


def test_options_object(backend):
    poke = qd.Module.parse(KERNELS).kernel("poke", backend)
    x = np.zeros(4, np.float32)
    with pytest.raises(qd.Error) as e:
        poke(qd.LaunchOptions(bounds_checked=True), x=x, k=6)
    assert "index [6] is out of range for '%x' of shape [4]" in str(e.value)
    poke(qd.LaunchOptions(bounds_checked=True), x=x, k=2)
    np.testing.assert_array_equal(x, [0, 0, 1, 0])
    with pytest.raises(qd.Error, match="must be a qd.LaunchOptions, not a bool"):
        poke(True, x=x, k=1)
    # The old keyword is a kernel argument now: the error says where options go.
    with pytest.raises(qd.Error) as e:
        poke(x=x, k=1, bounds_checked=True)
    assert "no argument named %bounds_checked" in str(e.value)
    assert "pass qd.LaunchOptions(bounds_checked=...) before the kernel's arguments" in \
        str(e.value)


def test_streams_are_refused_without_them(backend):
    poke = qd.Module.parse(KERNELS).kernel("poke", backend)
    x = np.zeros(4, np.float32)
    name = {"cpu": "CPU", "interp": "interpreter"}[backend.name]
    with pytest.raises(qd.Error) as e:
        poke(qd.LaunchOptions(stream=0x1234), x=x, k=1)
    assert f"the {name} backend has no streams" in str(e.value) and e.value.code == 3
    np.testing.assert_array_equal(x, 0)
    # Asynchronous is synchronous there: the result is readable at once.
    poke(qd.LaunchOptions(asynchronous=True), x=x, k=1)
    np.testing.assert_array_equal(x, [0, 1, 0, 0])
    backend.synchronize()


def test_timeout():
    spin = qd.Module.parse(KERNELS).kernel("spin", qd.backend("interp"))
    with pytest.raises(qd.Error) as e:
        spin(qd.LaunchOptions(timeout=0.05), n=-1)
    assert "ran past its timeout of 50 ms" in str(e.value) and e.value.code == 4
    spin(qd.LaunchOptions(timeout=5.0), n=100)


def test_gradient_launch_with_an_argument_named_seeds(backend):
    module = qd.Module.parse(KERNELS)
    module.gradient("sinloop")
    program = qd.Program(module, backend)
    x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
    x_grad, y, y_grad = (np.zeros(4, np.float32) for _ in range(3))
    program.launch_with_gradient("sinloop", "sinloop_grad", {"y": 1.0},
                                 qd.LaunchOptions(bounds_checked=True),
                                 seeds=qd.Ndarray(x, grad=x_grad), n=1,
                                 y=qd.Ndarray(y, grad=y_grad))
    np.testing.assert_allclose(y, np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(x_grad, np.cos(x), rtol=1e-6)


def test_adstack_memory_budget_reaches_the_launch():
    module = qd.Module.parse(KERNELS)
    module.gradient("sinloop")
    program = qd.Program(module, qd.backend("cpu"))
    x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
    x_grad, y, y_grad = (np.zeros(4, np.float32) for _ in range(3))
    args = dict(seeds=qd.Ndarray(x, grad=x_grad), n=3, y=qd.Ndarray(y, grad=y_grad))
    with pytest.raises(qd.Error) as e:
        program.launch_with_gradient("sinloop", "sinloop_grad", {"y": 1.0},
                                     qd.LaunchOptions(adstack_memory_budget=1), **args)
    assert "more than the adstack memory budget of 1 bytes" in str(e.value)
    assert e.value.code == 8  # QD_RESOURCE_EXHAUSTED
    program.launch_with_gradient("sinloop", "sinloop_grad", {"y": 1.0},
                                 qd.LaunchOptions(refine_adstacks_above_bytes=0), **args)


def test_tape_launch_with_an_argument_named_kernel_and_heap_report(backend):
    module = qd.Module.parse(KERNELS)
    tape = qd.Tape(module, backend)
    seeds = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    tape.launch("names", seeds=seeds, bounds_checked=1, options=2.0, kernel=out)
    np.testing.assert_array_equal(out, 2 * seeds + 1)
    module2 = qd.Module.parse(KERNELS)
    module2.gradient("sinloop")
    tape2 = qd.Tape(module2, backend)
    x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
    xg, y, yg = (np.zeros(4, np.float32) for _ in range(3))
    tape2.launch("sinloop", seeds=qd.Ndarray(x, grad=xg), n=3, y=qd.Ndarray(y, grad=yg))
    tape2.backward([(yg, 1.0)])
    memory = tape2.memory()
    if backend.name == "interp":
        assert memory["adstack_heap_bytes"] is None and memory["adstack_heap_threads"] is None
    else:  # three pushes of 4 bytes per thread at least
        assert memory["adstack_heap_threads"] >= 1
        assert memory["adstack_heap_bytes"] >= 12 * memory["adstack_heap_threads"]
