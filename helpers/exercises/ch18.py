"""Exercises of chapter 18 (memory optimisation): checkers and reference solutions."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from . import Hint, exercise


class _NoTensorOps(TorchDispatchMode):
    """Raises on any ATen operator (and records it, so an answer that catches the error still fails).

    Reading a tensor's metadata (``numel()``, ``element_size()``, ``shape``, ``dtype``,
    ``requires_grad``) dispatches no operator and works; creating, copying or computing with a tensor
    (``copy.deepcopy``, an optimizer step, building a model, even on the meta device) does not.
    """

    def __init__(self):
        super().__init__()
        self.used: str | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.used = self.used or str(func)
        raise RuntimeError(f"this exercise asks for a prediction from the shapes: {func} ran a tensor operation")


#: ATen operators that only create a tensor (torch.tensor(0.0) issues aten.lift_fresh): named as such in the hint.
_FACTORIES = frozenset({
    "lift_fresh", "lift_fresh_copy", "scalar_tensor", "zeros", "ones", "empty", "full", "arange", "linspace",
    "logspace", "eye", "rand", "randn", "randint", "randperm", "empty_strided", "new_empty", "new_zeros", "new_ones",
    "new_full", "zeros_like", "ones_like", "empty_like", "full_like", "_to_copy",
})


def _predicted(candidate, args, measuring: str, how: str):
    """Call ``candidate(*args)`` with tensor operations refused; raise a Hint if it tried one."""
    mode = _NoTensorOps()
    error = None
    try:
        with mode:
            got = candidate(*args)
    except RuntimeError as err:
        error = err
    if mode.used is not None:
        op = mode.used.split(".")[1] if mode.used.count(".") >= 1 else mode.used
        if op in _FACTORIES:
            what = (f"your answer ran a tensor operation that creates a tensor ({mode.used}, as torch.tensor, "
                    "torch.zeros or torch.empty do). "
                    f"This exercise allows no tensor to be created, not even a scalar: predict the bytes from {how}.")
        else:
            what = (f"your answer ran a tensor operation ({mode.used}), as code that {measuring} does. This "
                    "exercise asks you to predict the bytes, creating and computing with no tensor.")
        raise Hint(
            what,
            f"Compute the answer with Python arithmetic from {how}; reading numel(), element_size(), shape, "
            f"dtype and requires_grad is allowed, and a dtype's size in bytes is its itemsize "
            f"(torch.float32.itemsize); creating or computing with tensors is not.",
        )
    if error is not None:
        raise error
    return got

# --------------------------------------------------------------------------
# 18.adam_state_bytes
# --------------------------------------------------------------------------


def _adam_state_bytes(model: nn.Module) -> int:
    """Bytes that ``torch.optim.Adam(model.parameters())`` keeps in ``optimizer.state`` after one step.

    Args:
        model: any ``nn.Module``; its parameters may have any floating dtype,
            and some may be frozen (``requires_grad=False``).

    Returns:
        An int. Adam keeps two running moments per trained parameter,
        ``exp_avg`` and ``exp_avg_sq``, each with the parameter's shape and
        dtype, plus a ``step`` counter that is a 0-dimensional float32 tensor
        (4 bytes; ``torch.optim.optimizer._get_scalar_dtype``). A frozen
        parameter gets no gradient, so ``step()`` skips it and it has no state.
    """
    return sum(2 * p.numel() * p.element_size() + 4 for p in model.parameters() if p.requires_grad)


def _measured_adam_state_bytes(model: nn.Module, x: torch.Tensor) -> int:
    """Run one Adam step on ``model`` (as most code builds it) and sum the bytes of every state tensor."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(x).float().square().mean().backward()
    optimizer.step()
    return sum(v.numel() * v.element_size() for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))


def _adam_cases():
    g = torch.Generator().manual_seed(18)

    def init(model):
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        return model

    mlp = init(nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10)))
    frozen = init(nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10)))
    frozen[0].requires_grad_(False)  # a frozen backbone layer, as in transfer learning
    half = init(nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 10))).to(torch.bfloat16)
    double = init(nn.Sequential(nn.Linear(20, 8), nn.LayerNorm(8), nn.Linear(8, 3))).double()
    return [
        ("a float32 MLP", mlp, torch.float32),
        ("an MLP whose first layer is frozen (requires_grad=False)", frozen, torch.float32),
        ("a bfloat16 MLP", half, torch.bfloat16),
        ("a float64 model with a LayerNorm", double, torch.float64),
    ]


def _as_int(value, label) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise AssertionError(f"return one int (a number of bytes); for {label} you returned {value!r}")
    return value


@exercise(
    "18.adam_state_bytes",
    "return the number of bytes torch.optim.Adam(model.parameters()) keeps in optimizer.state after one "
    "step, computed from the model's parameters alone (without creating an optimizer or any tensor, not even "
    "a scalar).",
    reference=_adam_state_bytes,
    hint="Adam creates state only for parameters that receive a gradient, so frozen ones cost nothing. For "
         "each trained parameter it keeps two moment tensors of that parameter's shape and dtype, plus a "
         "step counter that is a small float32 tensor of its own (the breakdown in 'Where the memory "
         "goes'); add it all up in plain Python from numel() and element_size(), without creating any "
         "tensor or optimizer.",
)
def _test_adam_state_bytes(candidate) -> None:
    for label, model, dtype in _adam_cases():
        params = list(model.parameters())
        trained = [p for p in params if p.requires_grad]
        got = _as_int(_predicted(candidate, (model,), "measures Adam's state (a copy of the model, a real step)",
                                 "each parameter's numel(), element_size() and requires_grad"), label)
        x = torch.randn(5, 20, generator=torch.Generator().manual_seed(0)).to(dtype)
        want = _measured_adam_state_bytes(model, x)
        if got == want:
            continue
        n_tensors = len(trained)
        numel = sum(p.numel() for p in trained)
        if got == want - 4 * n_tensors:
            raise AssertionError(
                f"{label}: {got} bytes is {4 * n_tensors} short: each parameter tensor also has a 'step' "
                f"counter, a tensor of its own (measured: {want})"
            )
        if got == sum(2 * p.numel() * p.element_size() + 4 for p in params) or got == sum(
            2 * p.numel() * p.element_size() for p in params
        ):
            raise AssertionError(
                f"{label}: you counted the frozen parameters too. A parameter with requires_grad=False gets no "
                f".grad, so Adam's step() skips it and creates no state for it (measured: {want})"
            )
        if got in (8 * numel + 4 * n_tensors, 8 * numel):
            raise AssertionError(
                f"{label}: you assumed 4 bytes per element, but the moments take the parameter's dtype, "
                f"whatever it is (measured: {want})"
            )
        if got in (want // 2, (want - 4 * n_tensors) // 2, (want - 4 * n_tensors) // 2 + 4 * n_tensors):
            raise AssertionError(
                f"{label}: that is about half: Adam keeps two moments per parameter, exp_avg and exp_avg_sq "
                f"(measured: {want})"
            )
        raise AssertionError(f"{label}: Adam's state measured after one step is {want} bytes, you returned {got}")


# --------------------------------------------------------------------------
# 18.saved_activation_bytes
# --------------------------------------------------------------------------

_SAVES_OUTPUT = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}
_SAVES_INPUT = {"gelu": nn.GELU, "silu": nn.SiLU}


def _saved_activation_bytes(batch: int, sizes: list[int], activation: str) -> int:
    """Bytes of activations autograd saves in the forward pass of an MLP, from its shapes alone.

    The MLP is ``Linear(sizes[0], sizes[1]) -> act -> Linear(sizes[1], sizes[2]) -> act -> ... -> Linear``
    (no activation after the last Linear), float32, with an input ``[batch, sizes[0]]`` that does not
    require grad; parameters are not counted (they are memory anyway).

    Each ``Linear`` saves its input (for the weight's gradient). ReLU, tanh and sigmoid save their
    **output**, which is the same tensor the next ``Linear`` saves, so it is stored once; GELU and
    SiLU save their **input** (the previous Linear's output), a second tensor of the same size.

    Returns:
        ``4 * batch * (sizes[0] + k * sum(sizes[1:-1]))`` with ``k = 1`` for relu/tanh/sigmoid and
        ``k = 2`` for gelu/silu.

    Raises:
        ValueError: an unknown activation.
    """
    if activation in _SAVES_OUTPUT:
        per_hidden = 1
    elif activation in _SAVES_INPUT:
        per_hidden = 2
    else:
        raise ValueError(f"unknown activation {activation!r}")
    return 4 * batch * (sizes[0] + per_hidden * sum(sizes[1:-1]))


def _build_mlp(sizes: list[int], activation: str) -> nn.Sequential:
    act = {**_SAVES_OUTPUT, **_SAVES_INPUT}[activation]
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def _measured_saved_bytes(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes of distinct non-parameter storages that autograd saves during ``model(x)``."""
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in param_storages:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(saved.values())


@exercise(
    "18.saved_activation_bytes",
    "return the bytes of activations autograd saves for backward in the forward pass of a float32 MLP "
    "Linear -> act -> Linear -> ... -> Linear with layer widths `sizes`, for a [batch, sizes[0]] input, "
    "where act is 'relu', 'tanh', 'sigmoid', 'gelu' or 'silu' (parameters not counted, each tensor once), "
    "predicted from the shapes without creating any tensor.",
    reference=_saved_activation_bytes,
    hint="Run one Linear and one of each activation under the chapter's saved_tensors and note, for each "
         "saved tensor, whether it is the layer's input or its output. A Linear's input is the previous "
         "activation's output, so a tensor that both save is stored only once, and an activation that "
         "keeps its input adds a second one; the network's input counts too even though it does not "
         "require grad, and the final logits are not saved.",
)
def _test_saved_activation_bytes(candidate) -> None:
    cases = [
        (32, [784, 256, 10], "relu"),
        (32, [784, 256, 10], "gelu"),
        (8, [10, 20, 30, 5], "tanh"),
        (16, [64, 128, 128, 64, 8], "silu"),
        (5, [12, 7], "relu"),  # a single Linear: only its input
        (4, [3, 50, 50, 2], "sigmoid"),
    ]
    g = torch.Generator().manual_seed(1)
    for batch, sizes, activation in cases:
        label = f"batch {batch}, sizes {sizes}, {activation}"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = _build_mlp(sizes, activation)
        want = _measured_saved_bytes(model, torch.randn(batch, sizes[0], generator=g))
        got = _as_int(_predicted(candidate, (batch, list(sizes), activation), "builds and runs a model",
                                 "the batch, the widths in `sizes` and what each layer saves"), label)
        if got == want:
            continue
        hidden = sum(sizes[1:-1])
        if got == 4 * batch * (sizes[0] + 2 * hidden) and activation in _SAVES_OUTPUT:
            raise AssertionError(
                f"{label}: you returned {got}, counting each hidden layer twice. {activation} saves its "
                f"output, and the next Linear saves that very same tensor as its input: autograd stores it "
                f"once (measured: {want})"
            )
        if got == 4 * batch * (sizes[0] + hidden) and activation in _SAVES_INPUT:
            raise AssertionError(
                f"{label}: you returned {got}. Unlike ReLU, {activation} needs its *input* for the backward "
                f"pass, a second tensor besides its output (which the next Linear saves) (measured: {want})"
            )
        if got == want - 4 * batch * sizes[0]:
            raise AssertionError(
                f"{label}: {got} leaves out the input batch: the first Linear saves it to compute its weight's "
                f"gradient, even though the input itself does not require grad (measured: {want})"
            )
        if got == want // 4:
            raise AssertionError(f"{label}: {got} is a count of elements; float32 takes 4 bytes each (measured: {want})")
        if got == want + 4 * batch * sizes[-1]:
            raise AssertionError(
                f"{label}: {got} includes the output logits, which no layer saves (measured: {want})"
            )
        raise AssertionError(f"{label}: autograd saved {want} bytes (measured with saved_tensors_hooks), you returned {got}")
