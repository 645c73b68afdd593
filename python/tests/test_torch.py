"""PyTorch tensors used in place by qd launches, and qd.torch.function: a kernel as an
autograd function whose backward launches its reverse-mode gradient kernel."""
import pytest

import qd

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import qd.torch  # noqa: E402  (after the skip: it imports torch)

ENERGY = """kernel @energy(%x: ndarray<f64, 1> grad, %w: f64, %loss: ndarray<f64, 1> grad) {
  %n = shape %x, 0 : i32
  parallel for %i = 0 to %n {
    %v = load %x[%i] : f64
    %s = sin %v : f64
    %e = mul %w, %s : f64
    %p = mul %e, %v : f64
    %zero = const 0 : i32
    atomic_add %loss[%zero], %p : f64
  }
}
"""

PRODUCT = """kernel @product(%a: ndarray<f64, 1> grad, %b: ndarray<f64, 1> grad,
                 %out: ndarray<f64, 1> grad) {
  %n = shape %a, 0 : i32
  parallel for %i = 0 to %n {
    %x = load %a[%i] : f64
    %y = load %b[%i] : f64
    %p = mul %x, %y : f64
    %s = sin %p : f64
    store %out[%i], %s
  }
}
"""


def energy_and_grad(x, w):
    return w * (torch.sin(x) * x).sum(), w * (torch.sin(x) + x * torch.cos(x))


def test_tensors_in_place():
    module = qd.Module.parse(PRODUCT)
    k = module.kernel("product", qd.backend("cpu"))
    a = torch.linspace(0, 1, 5, dtype=torch.float64)
    b = torch.full((5,), 2.0, dtype=torch.float64)
    out = torch.zeros(5, dtype=torch.float64)
    ga, gb, gout = torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64), \
        torch.zeros(5, dtype=torch.float64)
    address = out.data_ptr()
    k(a=qd.Ndarray(a, ga), b=qd.Ndarray(b, gb), out=qd.Ndarray(out, gout))
    torch.testing.assert_close(out, torch.sin(a * b))
    assert out.data_ptr() == address
    assert qd.Buffer.borrow(out).data_ptr == address


def test_tensor_errors():
    module = qd.Module.parse(PRODUCT)
    k = module.kernel("product", qd.backend("cpu"))
    good = torch.zeros(4, dtype=torch.float64)

    def error(a):
        with pytest.raises(qd.Error) as e:
            k(a=qd.Ndarray(a, good), b=qd.Ndarray(good, good), out=qd.Ndarray(good, good))
        return str(e.value)

    assert "not contiguous" in error(torch.zeros(8, dtype=torch.float64)[::2])
    assert "torch.float16" in error(torch.zeros(4, dtype=torch.float16))
    assert "f32" in error(torch.zeros(4, dtype=torch.float32))  # the kernel takes f64
    assert "2 dimensions" in error(torch.zeros(2, 2, dtype=torch.float64))
    if torch.cuda.is_available():
        assert "qd.backend('cuda')" in error(torch.zeros(4, dtype=torch.float64, device="cuda"))


def test_function_gradient_matches_torch():
    module = qd.Module.parse(ENERGY)
    fn = qd.torch.function(module, "energy", outputs={"loss": (1,)})
    assert fn.inputs == ("x", "w")
    x = torch.linspace(-2, 2, 7, dtype=torch.float64, requires_grad=True)
    loss = fn.apply(x, 0.75)
    want, want_grad = energy_and_grad(x.detach(), 0.75)
    torch.testing.assert_close(loss, want.reshape(1))
    (3 * loss).sum().backward()
    torch.testing.assert_close(x.grad, 3 * want_grad)


def test_backward_twice_accumulates_once_each():
    module = qd.Module.parse(ENERGY)
    fn = qd.torch.function(module, "energy", outputs={"loss": (1,)})
    x = torch.linspace(0.1, 1.5, 5, dtype=torch.float64, requires_grad=True)
    loss = fn.apply(x, 0.5)
    loss.sum().backward(retain_graph=True)
    first = x.grad.clone()
    _, want = energy_and_grad(x.detach(), 0.5)
    torch.testing.assert_close(first, want)  # not doubled
    loss.sum().backward()  # the same graph again: the seed was not consumed
    torch.testing.assert_close(x.grad, 2 * want)
    loss2 = fn.apply(x, 0.5)  # a second call: nothing left over from the first
    x.grad = None
    loss2.sum().backward()
    torch.testing.assert_close(x.grad, want)


def test_input_used_twice():
    module = qd.Module.parse(PRODUCT)
    fn = qd.torch.function(module, "product", outputs={"out": lambda a, b: a.shape})
    x = torch.linspace(0.2, 1.0, 4, dtype=torch.float64, requires_grad=True)
    out = fn.apply(x, x)  # sin(x * x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach() * torch.cos(x.detach() ** 2))


def test_gradcheck_f64():
    module = qd.Module.parse(PRODUCT)
    fn = qd.torch.function(module, "product", outputs={"out": lambda a, b: a.shape})
    a = torch.rand(6, dtype=torch.float64, requires_grad=True)
    b = torch.rand(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fn.apply, (a, b), eps=1e-6, atol=1e-8)
    module2 = qd.Module.parse(ENERGY)
    fn2 = qd.torch.function(module2, "energy", outputs={"loss": (1,)})
    x = torch.rand(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: fn2.apply(t, 1.25), (x,), eps=1e-6, atol=1e-8)


def test_function_errors():
    module = qd.Module.parse(ENERGY)
    with pytest.raises(ValueError, match="has no argument %nope"):
        qd.torch.function(module, "energy", outputs={"nope": (1,)})
    fn = qd.torch.function(module, "energy", outputs={"loss": (1,)})
    with pytest.raises(qd.Error, match=r"%x\) of kernel @energy is an ndarray<f64, 1>, but the "
                       "buffer given holds f32"):
        fn.apply(torch.zeros(3, dtype=torch.float32), 1.0)
    with pytest.raises(TypeError, match="takes 2 inputs"):
        fn.apply(torch.zeros(3, dtype=torch.float64))


def cuda_backend():
    """qd's CUDA backend, or a skip saying which of PyTorch and qd has no CUDA device."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch here")
    try:
        return qd.backend("cuda")
    except qd.Error as e:
        pytest.skip(f"qd has no CUDA device here: {e}")


def test_cuda_tensors():
    cuda = cuda_backend()
    module = qd.Module.parse(ENERGY)
    fn = qd.torch.function(module, "energy", outputs={"loss": (1,)}, backend=cuda)
    x = torch.linspace(-1, 1, 9, dtype=torch.float64, device="cuda", requires_grad=True)
    loss = fn.apply(x, 0.5)
    loss.sum().backward()
    want, want_grad = energy_and_grad(x.detach(), 0.5)
    torch.testing.assert_close(loss, want.reshape(1))
    torch.testing.assert_close(x.grad, want_grad)


def test_gradcheck_f64_cuda():
    cuda = cuda_backend()
    module = qd.Module.parse(PRODUCT)
    fn = qd.torch.function(module, "product", outputs={"out": lambda a, b: a.shape}, backend=cuda)
    a = torch.linspace(-1, 1, 7, dtype=torch.float64, device="cuda", requires_grad=True)
    b = torch.linspace(0.5, 2, 7, dtype=torch.float64, device="cuda", requires_grad=True)
    assert torch.autograd.gradcheck(fn.apply, (a, b), eps=1e-6, atol=1e-8)


POKE = """kernel @poke(%x: ndarray<f64, 1>, %k: i32) {
  %one = const 1 : f64
  store %x[%k], %one
}
"""


def test_cuda_stream_gradients_match_cpu():
    cuda_backend()
    module = qd.Module.parse(PRODUCT)
    fn = qd.torch.function(module, "product", outputs={"out": lambda a, b: a.shape})
    a_cpu = torch.linspace(-1, 1, 257, dtype=torch.float64, requires_grad=True)
    b_cpu = torch.linspace(0.5, 2, 257, dtype=torch.float64, requires_grad=True)
    weights = torch.linspace(1, 3, 257, dtype=torch.float64)
    out_cpu = fn.apply(a_cpu, b_cpu)
    (out_cpu * weights).sum().backward()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        a = a_cpu.detach().cuda().requires_grad_()
        b = b_cpu.detach().cuda().requires_grad_()
        out = fn.apply(a, b)  # on `stream`, asynchronously
        (out * weights.cuda()).sum().backward()
    stream.synchronize()
    qd.torch.synchronize()  # no launch reported an error
    torch.testing.assert_close(out.cpu(), out_cpu.detach())
    torch.testing.assert_close(a.grad.cpu(), a_cpu.grad)
    torch.testing.assert_close(b.grad.cpu(), b_cpu.grad)


def test_cuda_launch_waits_for_its_stream_on_the_gpu_not_the_host():
    cuda_backend()
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("this PyTorch has no torch.cuda._sleep")
    k = qd.Module.parse(PRODUCT).kernel("product", qd.torch.backend("cuda"))
    n = 1000
    a = torch.zeros(n, dtype=torch.float64, device="cuda")
    b = torch.full((n,), 0.5, dtype=torch.float64, device="cuda")
    out = torch.zeros(n, dtype=torch.float64, device="cuda")
    args = {name: qd.Ndarray(t, grad=torch.zeros_like(t)) for name, t in
            (("a", a), ("b", b), ("out", out))}
    k(**args)  # compiled once first
    torch.cuda.synchronize()
    new = torch.linspace(0, 2, n, dtype=torch.float64, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(4_000_000_000)  # a few seconds of GPU clock cycles on `stream`
        a.copy_(new)  # queued behind the sleep
        k(**args)  # reads the copied `a`: ordered on `stream`
        busy = not stream.query()  # the host did not wait for the sleep
    assert busy, "the launch waited on the host for the stream"
    stream.synchronize()
    qd.torch.synchronize()
    torch.testing.assert_close(out, torch.sin(new * 0.5))


def test_cuda_deferred_error_surfaces_at_synchronize():
    cuda_backend()
    backend = qd.torch.backend("cuda")
    poke = qd.Module.parse(POKE).kernel("poke", backend)
    x = torch.zeros(4, dtype=torch.float64, device="cuda")
    with pytest.raises(qd.Error) as direct:
        poke(qd.LaunchOptions(bounds_checked=True, asynchronous=False), x=x, k=9)
    assert "index [9] is out of range for '%x' of shape [4]" in str(direct.value)
    assert "reported by a later call" not in str(direct.value)
    poke(qd.LaunchOptions(bounds_checked=True), x=x, k=9)  # returns before the kernel ran
    with pytest.raises(qd.Error) as late:
        qd.torch.synchronize()
    assert str(late.value).startswith(str(direct.value))
    assert "reported by a later call: the launch was asynchronous" in str(late.value)
    qd.torch.synchronize()  # reported once
    poke(qd.LaunchOptions(bounds_checked=True), x=x, k=2)
    qd.torch.synchronize()
    torch.testing.assert_close(x.cpu(), torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=torch.float64))


def test_gradcheck_f64_cuda_on_a_stream():
    cuda_backend()
    module = qd.Module.parse(ENERGY)
    fn = qd.torch.function(module, "energy", outputs={"loss": (1,)})
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.linspace(-1, 1, 9, dtype=torch.float64, device="cuda", requires_grad=True)
        assert torch.autograd.gradcheck(lambda t: fn.apply(t, 1.25), (x,), eps=1e-6, atol=1e-8)
    qd.torch.synchronize()
