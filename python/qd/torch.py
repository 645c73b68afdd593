"""A qd kernel as a PyTorch autograd function (docs/python.md).

    fn = qd.torch.function(module, "energy", outputs={"loss": (1,)})
    loss = fn.apply(x, 0.25)      # the kernel's other arguments, in its order
    loss.sum().backward()         # x.grad += d loss / d x, by @energy_grad

The forward launches the kernel on fresh zeroed output tensors; the backward
launches its reverse-mode gradient kernel (built once, Module.gradient) with
the saved inputs and outputs, each output's grad companion seeded with a copy
of the incoming gradient and each input's with fresh zeros, and returns those
to autograd, which accumulates them into .grad. Nothing is kept between
calls, so a second backward (retain_graph) or an input passed twice
accumulates exactly like any other PyTorch operation.

CUDA tensors run on qd.torch.backend(device), the CUDA backend of their
device, on PyTorch's current stream of that device, asynchronously: the
host does not wait for the kernels, and what they report (an index out of
range, an adstack overflow) is raised by the next call that waits,
qd.torch.synchronize() or a synchronous launch on that backend
(docs/python.md, "CUDA tensors and streams").
"""
import threading

import torch

from . import LaunchOptions, Ndarray, backend as make_backend

_backends = {}
_lock = threading.Lock()


def backend(device):
    """The qd backend qd.torch runs tensors of torch `device` on, made once: "cpu" for CPU
    tensors, "cuda" on the tensor's GPU for CUDA tensors ("amdgpu" under ROCm's PyTorch)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (device.type, device.index)
    with _lock:
        b = _backends.get(key)
        if b is None:
            gpu = "amdgpu" if getattr(torch.version, "hip", None) else "cuda"  # ROCm's torch
            b = _backends[key] = make_backend("cpu") if device.type == "cpu" else \
                make_backend(gpu, device=device.index)
    return b


_default_backend = backend


def synchronize(device=None):
    """Waits for the asynchronous launches qd.torch made on the backends of
    qd.torch.backend (those of `device` only, when given) and raises the first error one of
    them reported. A function made with backend= is synchronised by backend.synchronize()."""
    with _lock:
        chosen = [b for (kind, index), b in _backends.items()
                  if device is None or (kind, index) == (torch.device(device).type,
                                                         torch.device(device).index)]
    for b in chosen:
        b.synchronize()

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32,
           "i64": torch.int64, "i1": torch.bool}


def _companions(arg, value):
    """`value` with the zeroed companions its argument declares (a launch needs them; the
    kernel itself does not use them)."""
    if not isinstance(value, torch.Tensor) or not (arg.has_grad or arg.has_dual):
        return value
    return Ndarray(value, grad=torch.zeros_like(value) if arg.has_grad else None,
                   dual=torch.zeros_like(value) if arg.has_dual else None)


def function(module, kernel, outputs, backend=None, gradient=None, asynchronous=True):
    """A torch.autograd.Function subclass running `kernel` of `module`.

    outputs: {argument name: shape}, the ndarray arguments the kernel writes, each made as a
      zeroed tensor of that shape (a tuple, or a callable taking the inputs by name and
      returning one) and returned by `apply` (a tuple when there are several).
    backend: a qd backend (default: qd.torch.backend(device) of the tensors' device).
    gradient: the name of the gradient kernel (default: built now, "<kernel>_grad").
    asynchronous: CUDA launches (forward and backward) return without waiting for the
      kernels, on PyTorch's current stream; False: they wait, and raise their own errors.

    `apply` takes the kernel's other arguments in the kernel's order (`fn.inputs` names
    them): tensors for ndarrays, numbers for scalars.
    """
    arguments = module.arguments(kernel)
    names = [a.name for a in arguments]
    unknown = [o for o in outputs if o not in names]
    if unknown:
        raise ValueError(f"qd.torch.function: kernel @{kernel} has no argument "
                         f"{', '.join('%' + u for u in unknown)} (it has "
                         f"{', '.join('%' + n for n in names)})")
    info = {a.name: a for a in arguments}
    inputs = [n for n in names if n not in outputs]
    grad_name = gradient or module.gradient(kernel)
    kernels_of = {}
    cuda_options = LaunchOptions(asynchronous=asynchronous)

    def kernels(device):
        found = kernels_of.get(device)
        if found is None:
            chosen = backend or _default_backend(device)
            found = kernels_of[device] = (module.kernel(kernel, chosen),
                                          module.kernel(grad_name, chosen))
        return found

    def launch(k, device, args):
        if device.type == "cuda":
            k(cuda_options, **args)  # on the current stream of the tensors' device
        else:
            k(**args)

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *values):
            if len(values) != len(inputs):
                raise TypeError(f"@{kernel} takes {len(inputs)} inputs "
                                f"({', '.join(inputs)}), got {len(values)}")
            given = dict(zip(inputs, values))
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            device = tensors[0].device if tensors else torch.device("cpu")
            made = {}
            for name, shape in outputs.items():
                dims = shape(**given) if callable(shape) else shape
                made[name] = torch.zeros(tuple(dims), dtype=_DTYPES[info[name].dtype],
                                         device=device)
            args_of_launch = {n: _companions(info[n], v) for n, v in {**given, **made}.items()}
            launch(kernels(device)[0], device, args_of_launch)
            ctx.device = device
            ctx.scalars = {n: v for n, v in given.items() if not isinstance(v, torch.Tensor)}
            ctx.tensor_inputs = [n for n in inputs if n not in ctx.scalars]
            ctx.save_for_backward(*[given[n] for n in ctx.tensor_inputs],
                                  *[made[n] for n in outputs])
            results = tuple(made[n] for n in outputs)
            return results[0] if len(results) == 1 else results

        @staticmethod
        def backward(ctx, *grad_outputs):
            saved = ctx.saved_tensors
            k = len(ctx.tensor_inputs)
            args = dict(ctx.scalars)
            grads = {}
            for name, value in zip(ctx.tensor_inputs, saved[:k]):
                args[name] = _companions(info[name], value)
                if info[name].has_grad:
                    grads[name] = args[name].grad
            for name, value, g in zip(outputs, saved[k:], grad_outputs):
                args[name] = _companions(info[name], value)
                if info[name].has_grad and g is not None:
                    args[name].grad = g.detach().to(value.dtype).contiguous().clone()
            launch(kernels(ctx.device)[1], ctx.device, args)
            return tuple(grads.get(n) for n in inputs)

    Function.__name__ = Function.__qualname__ = f"qd_{kernel}"
    Function.inputs = tuple(inputs)
    Function.outputs = tuple(outputs)
    return Function
