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
"""
import torch

from . import Ndarray, backend as make_backend

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32,
           "i64": torch.int64, "i1": torch.bool}


def _companions(arg, value):
    """`value` with the zeroed companions its argument declares (a launch needs them; the
    kernel itself does not use them)."""
    if not isinstance(value, torch.Tensor) or not (arg.has_grad or arg.has_dual):
        return value
    return Ndarray(value, grad=torch.zeros_like(value) if arg.has_grad else None,
                   dual=torch.zeros_like(value) if arg.has_dual else None)


def function(module, kernel, outputs, backend=None, gradient=None):
    """A torch.autograd.Function subclass running `kernel` of `module`.

    outputs: {argument name: shape}, the ndarray arguments the kernel writes, each made as a
      zeroed tensor of that shape (a tuple, or a callable taking the inputs by name and
      returning one) and returned by `apply` (a tuple when there are several).
    backend: a qd backend (default: qd.backend("cuda") for CUDA tensors, else "cpu").
    gradient: the name of the gradient kernel (default: built now, "<kernel>_grad").

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
    backends = {}

    def kernels(device):
        kind = "cuda" if device.type == "cuda" else "cpu"
        if kind not in backends:
            b = backend or make_backend(kind)
            backends[kind] = (module.kernel(kernel, b), module.kernel(grad_name, b))
        return backends[kind]

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
            launch = {n: _companions(info[n], v) for n, v in {**given, **made}.items()}
            kernels(device)[0](**launch)
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
            kernels(ctx.device)[1](**args)
            return tuple(grads.get(n) for n in inputs)

    Function.__name__ = Function.__qualname__ = f"qd_{kernel}"
    Function.inputs = tuple(inputs)
    Function.outputs = tuple(outputs)
    return Function
