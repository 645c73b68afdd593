"""qd.Tape: gradients through several launches with NumPy arrays (the simulation of
unittests/CApiTapeTest.cpp), and the tape's errors as qd.Error."""
import os

import pytest

import qd

np = pytest.importorskip("numpy", reason="NumPy is not installed (Debian: python3-numpy)")

SIM_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "unittests",
                        "capi", "tape-sim.qd")
SIM = open(SIM_PATH).read()  # shared with unittests/CApiTapeTest.cpp
X0 = np.array([0.5, 1.25, -1.5, 2.0])
C = (1.0, 0.5, 2.0)


@pytest.fixture(params=["cpu", "interp"])
def backend(request):
    return qd.backend(request.param)


def simulation(backend):
    module = qd.Module.parse(SIM, "tape-sim.qd")
    for k in ("step", "total"):
        module.gradient(k)
        module.forward(k)
    a = qd.Ndarray(X0.copy(), grad=np.zeros(4), dual=np.zeros(4))
    b = qd.Ndarray(np.zeros(4), grad=np.zeros(4), dual=np.zeros(4))
    return module, a, b


def record(tape, a, b):
    """Step 0 maps a to b, step 1 b to a (overwriting the a step 0's gradient reads), step 2
    a to b; the loss is the sum of b."""
    for t, c in enumerate(C):
        src, dst = (a, b) if t % 2 == 0 else (b, a)
        tape.launch("step", src=src, dst=dst, c=c)
    tape.launch("total", x=b)


def test_simulation_gradient(backend):
    module, a, b = simulation(backend)
    tape = qd.Tape(module, backend, keep_initial_state=True)
    record(tape, a, b)
    assert len(tape) == 4
    # loss = sum 0.5 x^8 (c2 c1^2 c0^4 = 0.5), so dloss/dx = 4 x^7, exact in binary here.
    np.testing.assert_array_equal(b.primal, 0.5 * X0 ** 8)
    program = module.program(backend)
    assert program.field("loss").numpy()[()] == (0.5 * X0 ** 8).sum()
    tape.backward({"loss": 1.0})
    np.testing.assert_array_equal(a.grad, 4 * X0 ** 7)
    memory = tape.memory()
    assert memory["held_bytes"] > 0 and memory["peak_bytes"] >= memory["held_bytes"]
    assert memory["checkpoint_interval"] == 0

    # Seeds by grad array, one value per element (without the loss: b.grad seeded directly).
    tape.clear()
    assert len(tape) == 0 and tape.memory()["held_bytes"] == 0
    a.primal[:] = X0
    for t, c in enumerate(C):
        src, dst = (a, b) if t % 2 == 0 else (b, a)
        tape.launch("step", src=src, dst=dst, c=c)
    weights = np.array([1.0, 2.0, 0.0, -1.0])
    tape.backward([(b.grad, weights)])
    np.testing.assert_array_equal(a.grad, weights * 4 * X0 ** 7)

    # Forward mode: a.dual = 1 gives b.dual = dy/dx per element.
    tape.jvp([(a.dual, 1.0)])
    np.testing.assert_array_equal(b.dual, 4 * X0 ** 7)


def test_checkpoint_budget_gives_the_same_gradient(backend):
    module, a, b = simulation(backend)
    tape = qd.Tape(module.program(backend), checkpoint_budget=160)
    record(tape, a, b)
    a.grad[:] = 99.0  # zeroed by backward
    tape.backward({"loss": 1.0})
    np.testing.assert_array_equal(a.grad, 4 * X0 ** 7)
    memory = tape.memory()
    assert memory["checkpoint_interval"] >= 1 and memory["held_bytes"] <= 160


def test_tape_errors(backend):
    module, a, b = simulation(backend)
    tape = qd.Tape(module, backend, snapshots=False)
    tape.launch("step", src=a, dst=b, c=1.0)
    with pytest.raises(qd.Error) as e:
        tape.launch("step", src=b, dst=a, c=0.5)
    assert "launch 1 (@step) writes %dst, which the gradient of launch 0 (@step) reads" in \
        str(e.value)
    assert len(tape) == 1
    with pytest.raises(qd.Error) as e:
        tape.backward({"nope": 1.0})
    assert "%dst.grad of launch 0 (@step)" in str(e.value) and e.value.code == 3
    with pytest.raises(qd.Error) as e:
        tape.jvp({"loss": 1.0})  # no initial state kept
    assert "keepInitialState" in str(e.value) or "keep_initial_state" in str(e.value)
    with pytest.raises(qd.Error, match="needs a backend"):
        qd.Tape(module)
