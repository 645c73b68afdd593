"""The Python package over libqd-c: modules, backends, launches with NumPy arrays in place,
and errors as qd.Error carrying qd's message."""
import gc
import os

import pytest

import qd

np = pytest.importorskip("numpy", reason="NumPy is not installed (Debian: python3-numpy)")

SAXPY = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "saxpy.qd")).read()

ENERGY = """field @count : i32
kernel @energy(%x: ndarray<f64, 2> grad, %w: f64, %loss: ndarray<f64, 1> grad) {
  %rows = shape %x, 0 : i32
  %cols = shape %x, 1 : i32
  parallel for (%i, %j) = (0, 0) to (%rows, %cols) {
    %v = load %x[%i, %j] : f64
    %s = sin %v : f64
    %e = mul %w, %s : f64
    %zero = const 0 : i32
    atomic_add %loss[%zero], %e : f64
  }
}
"""


@pytest.fixture(params=["cpu", "interp"])
def backend(request):
    return qd.backend(request.param)


def test_version_and_backends():
    assert qd.version() == "0.3.0"
    assert qd.backends()[:2] == ["interp", "cpu"]


def test_parse_print_round_trip():
    module = qd.Module.parse(SAXPY, "saxpy.qd")
    text = str(module)
    assert str(qd.Module.parse(text)) == text
    assert module.kernels == ["saxpy"]
    assert [repr(a) for a in module.arguments("saxpy")] == [
        "%a: f32", "%x: ndarray<f32, 1>", "%y: ndarray<f32, 1>", "%out: ndarray<f32, 1>"]


def test_parse_error_names_the_location():
    with pytest.raises(qd.Error) as e:
        qd.Module.parse("kernel @k() {\n  %a = frob 1 : f32\n}\n", "bad.qd")
    assert str(e.value).startswith("bad.qd:2:8: error: unknown operation 'frob'")
    assert e.value.code == 3


def test_launch_in_place(backend):
    module = qd.Module.parse(SAXPY)
    saxpy = module.kernel("saxpy", backend)
    x = np.arange(6, dtype=np.float32)
    y = np.full(6, 0.5, np.float32)
    out = np.zeros(6, np.float32)
    address = out.ctypes.data
    for a in (2.0, 3, np.float32(4)):  # a float, an int and a NumPy scalar for %a: f32
        saxpy(a=a, x=x, y=y, out=out)
        np.testing.assert_array_equal(out, float(a) * x + 0.5)
    assert out.ctypes.data == address
    # The buffer a launch borrows is the array's own memory.
    assert qd.Buffer.borrow(out).data_ptr == address


def test_gradient_launch_and_fields(backend):
    module = qd.Module.parse(ENERGY)
    assert module.gradient("energy") == "energy_grad"
    assert module.gradient_adjoints("energy_grad") == (["%x"], ["%loss"])
    program = qd.Program(module, backend)
    x = np.linspace(0.1, 1.1, 6).reshape(2, 3)
    x_grad = np.full_like(x, 7.0)  # zeroed by the launch
    loss, loss_grad = np.zeros(1), np.zeros(1)
    program.launch_with_gradient("energy", "energy_grad", {"loss": 1.0}, w=0.5,
                                 x=qd.Ndarray(x, grad=x_grad), loss=qd.Ndarray(loss, loss_grad))
    np.testing.assert_allclose(loss, [0.5 * np.sin(x).sum()], rtol=1e-12)
    np.testing.assert_allclose(x_grad, 0.5 * np.cos(x), rtol=1e-12)
    count = program.field("count")
    assert count.shape == () and count.dtype == "i32"
    count.numpy()[...] = 5
    assert program.field("count").numpy() == 5


def test_argument_errors(backend):
    saxpy = qd.Module.parse(SAXPY).kernel("saxpy", backend)
    x, y, out = (np.zeros(4, np.float32) for _ in range(3))

    def error(**args):
        with pytest.raises(qd.Error) as e:
            saxpy(**{"a": 1.0, "x": x, "y": y, "out": out, **args})
        return str(e.value)

    assert "%x" in error(x=x.astype(np.float64)) and "f64" in error(x=x.astype(np.float64))
    assert "2 dimensions" in error(x=np.zeros((2, 2), np.float32))
    assert "not contiguous" in error(x=np.zeros(8, np.float32)[::2])
    assert "dtype int16" in error(x=x.astype(np.int16))
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    assert "read-only" in error(out=frozen)
    assert "no argument named %z" in error(z=1)
    assert "is no array" in error(y=[1, 2])
    assert "argument %a is a scalar f32; pass a number, not a value of type list" in error(a=[1])
    assert "%a" in error(a=np.ones(2, np.float32))
    with pytest.raises(qd.Error, match="argument %out of kernel @saxpy is missing"):
        saxpy(a=1.0, x=x, y=y)


def test_scalar_type_errors(backend):
    module = qd.Module.parse("""field @r : i32
kernel @k(%n: i32) {
  serial {
    store @r[], %n
  }
}
""")
    k = module.kernel("k", backend)
    k(n=41)
    assert module.program(backend).field("r").numpy() == 41
    with pytest.raises(qd.Error, match="argument %n is i32; pass an integer, not the float 2.5"):
        k(n=2.5)


def test_freed_buffer_raises():
    saxpy = qd.Module.parse(SAXPY).kernel("saxpy", qd.backend("interp"))
    x = qd.Buffer.zeros((4,), "f32")
    x.free()
    with pytest.raises(qd.Error, match="was freed") as e:
        saxpy(a=1.0, x=x, y=np.zeros(4, np.float32), out=np.zeros(4, np.float32))
    assert e.value.code == 9
    with pytest.raises(qd.Error, match="was freed"):
        x.shape


def test_cached_buffers_follow_their_arrays():
    saxpy = qd.Module.parse(SAXPY).kernel("saxpy", qd.backend("cpu"))
    for n in (3, 5, 3):  # new arrays, possibly at the addresses of the last ones
        x, y, out = np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
        saxpy(a=2.0, x=x, y=y, out=out)
        np.testing.assert_array_equal(out, np.full(n, 3.0))
        del x, y, out
        gc.collect()


def test_backend_errors():
    with pytest.raises(qd.Error, match="unknown backend 'tpu'; available backends: interp, cpu"):
        qd.backend("tpu")
    with pytest.raises(qd.Error, match="colour"):
        qd.backend("cpu", colour="blue")
    assert qd.backend("cpu", threads=2).name == "cpu"


def test_cuda_backend():
    try:
        cuda = qd.backend("cuda")
    except qd.Error as e:
        pytest.skip(f"no CUDA device here: {e}")
    saxpy = qd.Module.parse(SAXPY).kernel("saxpy", cuda)
    out = np.zeros(3, np.float32)
    saxpy(a=2.0, x=np.ones(3, np.float32), y=np.ones(3, np.float32), out=out)
    np.testing.assert_array_equal(out, [3, 3, 3])


def test_passes_and_sizing_report():
    module = qd.Module.parse("""kernel @k(%x: ndarray<f32, 1> grad, %y: ndarray<f32, 1> grad) {
  parallel for %i = 0 to 4 {
    %v = alloca f32
    %xi = load %x[%i] : f32
    store %v, %xi
    for %j = 0 to 3 {
      %a = load %v : f32
      %s = sin %a : f32
      store %v, %s
    }
    %r = load %v : f32
    store %y[%i], %r
  }
}
""", "loop.qd")
    module.run_passes("fold,dce")
    grad = module.gradient("k")
    with pytest.raises(qd.Error, match="no-such-pass"):
        module.run_passes("no-such-pass")
    cpu = qd.backend("cpu")
    x, gx = np.full(4, 0.5, np.float32), np.zeros(4, np.float32)
    y, gy = np.zeros(4, np.float32), np.ones(4, np.float32)
    program = module.program(cpu)
    program.launch_with_gradient("k", grad, {"y": 1.0}, x=qd.Ndarray(x, gx), y=qd.Ndarray(y, gy))
    expected = np.cos(0.5) * np.cos(np.sin(0.5)) * np.cos(np.sin(np.sin(0.5)))
    np.testing.assert_allclose(gx, expected, rtol=1e-5)
    report = cpu.sizing_report(module, grad)
    assert "tier 1 constant" in report and "= 3 (exact)" in report, report


def test_check_gradient():
    module = qd.Module.parse(ENERGY)
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    passed, report = qd.check_gradient(module, "energy", x=x, w=0.5, loss=np.zeros(1))
    assert passed, report
    assert "%x" in report
    with pytest.raises(qd.Error, match="has no argument %nope"):
        qd.check_gradient(module, "energy", nope=1.0)


class Foreign:
    """An array of another library, known to qd through DLPack alone."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()


def test_dlpack_objects_in_place():
    saxpy = qd.Module.parse(SAXPY).kernel("saxpy", qd.backend("cpu"))
    x, y, out = np.arange(3, dtype=np.float32), np.ones(3, np.float32), np.zeros(3, np.float32)
    for _ in range(2):  # the buffer made for each launch releases the tensor
        saxpy(a=3.0, x=Foreign(x), y=Foreign(y), out=Foreign(out))
        np.testing.assert_array_equal(out, [1, 4, 7])
    with pytest.raises(qd.Error, match="not contiguous"):
        saxpy(a=3.0, x=x, y=y, out=Foreign(np.zeros(6, np.float32)[::2]))
