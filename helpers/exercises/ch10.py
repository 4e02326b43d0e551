"""Exercises of chapter 10 (optimizers): checkers and reference solutions."""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from . import Hint, Shortcut, exercise

# --------------------------------------------------------------------------
# 10.sgd_step
# --------------------------------------------------------------------------


def _sgd_step(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    """One step of ``torch.optim.SGD`` (dampening 0) for one tensor, written out.

    Args:
        param, grad: tensors of one shape: the parameter before the step and its gradient.
        buf: the momentum buffer after the previous step, or ``None`` before the first step.
        lr, momentum, weight_decay, nesterov: as in ``torch.optim.SGD``.

    Returns:
        ``(new_param, new_buf)``: new tensors (``new_buf`` is ``None`` when
        ``momentum == 0``); the inputs are not modified.

    The update (PyTorch's form, see the ``torch.optim.SGD`` docs): ``g = grad
    + weight_decay * param`` (L2, through the gradient); ``buf = g`` on the first
    step, else ``buf = momentum * buf + g``; the direction is ``g + momentum * buf``
    with Nesterov, else ``buf``; ``param <- param - lr * direction``. The
    learning rate stays outside the buffer (Sutskever et al., 2013, put it
    inside), so a new ``lr`` takes effect at once.
    """
    g = grad + weight_decay * param
    if momentum == 0:
        return param - lr * g, None
    new_buf = g.clone() if buf is None else momentum * buf + g
    direction = g + momentum * new_buf if nesterov else new_buf
    return param - lr * direction, new_buf


def _sgd_variant(param, grad, buf, lr, momentum, weight_decay, nesterov, kind):
    """Common wrong versions of the SGD step, to name the mistake in a hint: (param, buf)."""
    g = grad if kind in ("no_decay", "decay_after") else grad + weight_decay * param
    if kind == "ema":
        new_buf = (1 - momentum) * g if buf is None else momentum * buf + (1 - momentum) * g
    elif kind == "lr_inside":
        new_buf = lr * g if buf is None else momentum * buf + lr * g
    else:
        new_buf = g if buf is None else momentum * buf + g
    if kind == "lr_inside":
        return param - (g * lr + momentum * new_buf if nesterov else new_buf), new_buf
    if kind == "nesterov_ignored":
        direction = new_buf
    else:
        direction = g + momentum * new_buf if nesterov else new_buf
    new = param - lr * direction
    if kind == "decay_after":
        new = new - lr * weight_decay * param
    return new, new_buf


def _shares_memory(a, b) -> bool:
    """Do tensors ``a`` and ``b`` use the same storage (one is the other, or a view of it)?"""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


_SGD_MISTAKES = {  # kind -> (what went wrong, fuller hint); neither pastes the fix
    "ema": (
        "your momentum buffer is an average, momentum * buf + (1 - momentum) * grad: the new gradient enters "
        "it scaled down, but torch.optim.SGD's default dampening=0 does not scale it",
        "look at where dampening enters the momentum row of the chapter's table (and the torch.optim.SGD "
        "documentation), and at what its default value makes of that factor; check the first step too",
    ),
    "lr_inside": (
        "you put the learning rate inside the buffer (the form of Sutskever et al., 2013); the checker changes "
        "lr between steps, as a scheduler would, and then the two forms part",
        "torch.optim.SGD's buffer holds gradients only, and the learning rate of the current step multiplies "
        "the direction when the parameter is updated, so a new lr takes effect at once",
    ),
    "nesterov_ignored": (
        "with nesterov=True your step follows the momentum buffer alone, as plain momentum does: the "
        "Nesterov look-ahead is missing",
        "Nesterov's direction is not the buffer itself: see the Nesterov row of the chapter's table "
        "(or the torch.optim.SGD documentation) for what the step moves along",
    ),
    "no_decay": (
        "the weight decay seems to be missing: your step is the same as with weight_decay=0",
        "in torch.optim.SGD weight decay is L2 regularisation: it changes the gradient that the rest of "
        "the step (buffer and update) uses",
    ),
    "decay_after": (
        "you applied the weight decay separately from the momentum buffer (decoupled, as AdamW does); "
        "in torch.optim.SGD the decay builds momentum too",
        "SGD's weight decay is L2: it enters through the gradient, before the buffer is updated",
    ),
}


# torch.optim.SGD and every function of torch.optim.sgd that performs its step (the public sgd and the private
# single-tensor, multi-tensor and fused implementations), and the fused kernel itself however it is reached.
# torch._foreach_* stay allowed: they are element-wise arithmetic on lists of tensors, and the answer still
# has to write the update rule with them.
_SGD_SHORTCUTS = (
    "torch.optim.SGD",
    *(Shortcut(f"torch.optim.sgd.{name}", does=f"`torch.optim.sgd.{name}` (torch.optim.SGD's own step)")
      for name in ("sgd", "_single_tensor_sgd", "_multi_tensor_sgd", "_fused_sgd")),
    Shortcut("torch._fused_sgd_", does="`torch._fused_sgd_` (torch.optim.SGD's fused kernel)"),
    *(Shortcut(f"torch.ops.aten.{op}", reached=True, does=f"`torch.ops.aten.{op}` (torch.optim.SGD's fused kernel)")
      for op in ("_fused_sgd_", "_fused_sgd")),
)


@exercise(
    "10.sgd_step",
    "write sgd_step(param, grad, buf, lr, momentum, weight_decay, nesterov) returning (new_param, new_buf) "
    "after one step of torch.optim.SGD, as new tensors (param, grad and buf left unchanged, and none of them "
    "returned); buf is None before the first step (and new_buf None when momentum is 0). Write it with tensor "
    "arithmetic: torch.optim.SGD, the functions of torch.optim.sgd and torch._fused_sgd_ are refused.",
    reference=_sgd_step,
    shortcuts=_SGD_SHORTCUTS,
    goal="the SGD update",
    hint="Follow the SGD rows of the table in 'The update rules, as torch.optim writes them': L2 weight "
         "decay changes the gradient before anything else, the momentum buffer holds gradients only (it "
         "starts as the first gradient, and with dampening 0 nothing scales the new one), and Nesterov "
         "steps along a different direction than the buffer itself. The current lr multiplies the "
         "direction only when the parameter is updated; return new tensors and leave the inputs alone.",
)
def _test_sgd_step(candidate) -> None:
    gen = torch.Generator().manual_seed(10)
    cases = [
        ("plain SGD", (3,), 0.0, 0.0, False),
        ("plain SGD, weight_decay 0.1", (4,), 0.0, 0.1, False),
        ("momentum 0.9", (2, 3), 0.9, 0.0, False),
        ("momentum 0.9, weight_decay 0.1", (4,), 0.9, 0.1, False),
        ("Nesterov, momentum 0.8", (3, 2), 0.8, 0.0, True),
        ("Nesterov, momentum 0.9, weight_decay 0.05", (5,), 0.9, 0.05, True),
    ]
    lrs = (0.1, 0.05, 0.02, 0.1)  # changed between steps, as a schedule would
    for label, shape, momentum, wd, nesterov in cases:
        start = torch.randn(shape, generator=gen, dtype=torch.float64)
        grads = [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in lrs]
        # The truth: torch.optim.SGD itself, in float64.
        p = start.clone().requires_grad_(True)
        opt = torch.optim.SGD([p], lr=lrs[0], momentum=momentum, weight_decay=wd, nesterov=nesterov)
        param, buf = start.clone(), None
        for step, (lr, g) in enumerate(zip(lrs, grads), start=1):
            opt.param_groups[0]["lr"] = lr
            p.grad = g.clone()
            opt.step()
            where = f"{label}, step {step} (lr {lr})"
            inputs = {"param": param.clone(), "grad": g.clone(), "buf": None if buf is None else buf.clone()}
            out = candidate(inputs["param"], inputs["grad"], inputs["buf"], lr, momentum, wd, nesterov)
            originals = {"param": param, "grad": g, "buf": buf}
            changed = [name for name, value in inputs.items()
                       if value is not None and not torch.equal(value, originals[name])]
            if changed:
                raise Hint(
                    f"{where}: your function changed its input {' and '.join(f'`{n}`' for n in changed)} in place; "
                    "the task asks for new tensors, with param, grad and buf left as they were",
                    "in-place methods (the ones ending in _, and +=, -=, *= on a tensor) write into the caller's "
                    "tensors: an optimizer owns those, and the checker reuses them for the next step. Build the "
                    "results with out-of-place operations",
                )
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise AssertionError(f"{where}: return a tuple (new_param, new_buf), got {type(out).__name__}")
            got_p, got_buf = out
            if not isinstance(got_p, torch.Tensor) or got_p.shape != param.shape:
                raise AssertionError(f"{where}: new_param should be a tensor of shape {tuple(param.shape)}")
            shared = [(out_name, in_name) for out_name, value in (("new_param", got_p), ("new_buf", got_buf))
                      for in_name, given in inputs.items() if _shares_memory(value, given)]
            if shared:
                out_name, in_name = shared[0]
                raise Hint(
                    f"{where}: your {out_name} is the input `{in_name}` itself (or a view of it), not a new tensor; "
                    "the task asks for new tensors",
                    "the caller owns its inputs: an optimizer overwrites the gradient at the next backward pass "
                    "(or frees it with zero_grad), and a buffer that is the gradient tensor would change with it. "
                    "A result built by out-of-place arithmetic owns its memory; one returned as is needs a copy "
                    "(Tensor.clone)",
                )
            want_buf = opt.state[p].get("momentum_buffer")
            param_ok = torch.allclose(got_p.detach().double(), p.detach(), rtol=1e-9, atol=1e-12)
            buf_ok = (got_buf is None) if momentum == 0 else (
                isinstance(got_buf, torch.Tensor) and got_buf.shape == param.shape
                and torch.allclose(got_buf.detach().double(), want_buf, rtol=1e-9, atol=1e-12)
            )
            if not (param_ok and buf_ok):
                for kind, (what, more) in _SGD_MISTAKES.items():
                    if (kind in ("no_decay", "decay_after") and wd == 0) or (kind == "nesterov_ignored" and not nesterov):
                        continue
                    if momentum == 0 and kind in ("ema", "lr_inside", "decay_after"):
                        continue
                    wrong_p, wrong_buf = _sgd_variant(param, g, buf, lr, momentum, wd, nesterov, kind)
                    same_p = torch.allclose(got_p.detach().double(), wrong_p, rtol=1e-9, atol=1e-12)
                    same_buf = momentum == 0 or buf_ok or (
                        isinstance(got_buf, torch.Tensor) and got_buf.shape == param.shape
                        and torch.allclose(got_buf.detach().double(), wrong_buf, rtol=1e-9, atol=1e-12)
                    )
                    if same_p and same_buf:
                        raise Hint(f"{where}: {what}", more)
            if not param_ok:
                diff = (got_p.detach().double() - p.detach()).abs().max().item()
                raise AssertionError(f"{where}: new_param differs from torch.optim.SGD by up to {diff:.2e}")
            if not buf_ok and momentum == 0:
                raise AssertionError(f"{where}: with momentum 0 there is no buffer: return (new_param, None)")
            if not buf_ok:
                raise Hint(
                    f"{where}: new_param is right but new_buf is not torch.optim.SGD's momentum buffer after "
                    "this step; the next step needs it",
                    "return the updated buffer, the one this step moved the parameter along (before the "
                    "Nesterov look-ahead), built from the gradient that already includes the weight decay",
                )
            # Continue from the true state, so one early mistake is reported once.
            param = p.detach().clone()
            buf = None if want_buf is None else want_buf.clone()


# --------------------------------------------------------------------------
# 10.decay_groups
# --------------------------------------------------------------------------


def _decay_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """The usual AdamW grouping: decay matrices and kernels, not biases or norm weights.

    Args:
        model: any ``nn.Module``.
        weight_decay: the decay of the first group.

    Returns:
        ``[{"params": decay, "weight_decay": weight_decay}, {"params": no_decay,
        "weight_decay": 0.0}]``. ``decay`` holds every trainable parameter
        with 2 or more dimensions (``Linear``/``Conv`` weights, embeddings);
        ``no_decay`` every trainable parameter with fewer (biases, the
        weights and biases of LayerNorm/BatchNorm/GroupNorm/RMSNorm, PReLU's slopes). Frozen
        parameters (``requires_grad=False``) are left out; a parameter shared by
        two modules appears once (``named_parameters`` removes duplicates).
    """
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class _CheckNet(nn.Module):
    """A small model with every case the grouping must handle.

    The layers have neutral names (``a``, ``b``, ...), so that a rule that looks for
    "norm", "bn" or "ln" in a parameter's name finds nothing; besides biases and
    the scales and shifts of BatchNorm, LayerNorm and RMSNorm, PReLU's learned
    slopes are 1-D parameters too, and a list of normalisation types misses them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Embedding(10, 8)
        self.b = nn.Conv1d(8, 8, kernel_size=3, padding=1)
        self.c = nn.BatchNorm1d(8)
        self.d = nn.PReLU(8)  # one learned slope per channel: a 1-D weight that is neither bias nor norm
        self.e = nn.LayerNorm(8)
        self.f = nn.RMSNorm(8)  # a 1-D weight, no bias
        self.g = nn.Linear(8, 8, bias=False)
        self.h = nn.Linear(8, 8)
        self.h.requires_grad_(False)  # frozen
        self.out = nn.Linear(8, 10)
        self.out.weight = self.a.weight  # tied weights: one parameter, two modules

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # [B, T] -> [B, T, 10]
        x = self.d(self.c(self.b(self.a(idx).transpose(1, 2)))).transpose(1, 2)
        return self.out(self.h(self.g(self.f(self.e(x)))))


def _names(model: nn.Module, params) -> list[str]:
    by_id = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    return sorted(by_id.get(id(p), "<not a parameter of the model>") for p in params)


@exercise(
    "10.decay_groups",
    "write decay_param_groups(model, weight_decay) returning two parameter groups: "
    '[{"params": <trainable params with 2+ dims>, "weight_decay": weight_decay}, '
    '{"params": <trainable params with fewer dims: biases, norm scales, ...>, "weight_decay": 0.0}], '
    "decided by each parameter's number of dimensions, frozen parameters left out.",
    reference=_decay_param_groups,
    hint="named_parameters() (or parameters()) visits a tied Parameter only once; skip the frozen ones and "
         "sort the rest into two real lists by their number of dimensions (Tensor.ndim), whatever their "
         "names or layer types. Then put the two lists into the group dicts the task describes, as the "
         "Parameter groups section builds groups.",
)
def _test_decay_groups(candidate) -> None:
    for wd in (0.05, 0.1):
        torch.manual_seed(0)
        model = _CheckNet()
        groups = candidate(model, wd)
        if not isinstance(groups, (list, tuple)) or len(groups) != 2 or not all(isinstance(g, dict) for g in groups):
            raise AssertionError("return a list of two dicts: the decay group first, then the no-decay group")
        for i, g in enumerate(groups):
            if "params" not in g or "weight_decay" not in g:
                raise AssertionError(f"group {i} needs the keys 'params' and 'weight_decay', it has {sorted(g)}")
        for i, g in enumerate(groups):
            if not isinstance(g["params"], (list, tuple)):
                raise Hint(
                    f"group {i}'s 'params' is a {type(g['params']).__name__}, not a list: a generator or "
                    "iterator can be read only once, so whoever reads the group second finds it empty "
                    "(the chapter's Pitfall 1)",
                    "materialise each group's parameters into a real list before returning them, as Pitfall 1 "
                    "does for the second optimizer",
                )
        decay, no_decay = (list(g["params"]) for g in groups)
        if groups[0]["weight_decay"] != wd or groups[1]["weight_decay"] != 0:
            raise AssertionError(
                f"with weight_decay={wd} the first group needs 'weight_decay': {wd} and the second 'weight_decay': 0.0; "
                f"you gave {groups[0]['weight_decay']!r} and {groups[1]['weight_decay']!r}"
            )
        for label, params in (("decay", decay), ("no-decay", no_decay)):
            if len({id(p) for p in params}) != len(params):
                raise Hint(
                    f"the {label} group lists a parameter twice ({_names(model, params)}): out.weight is tied to "
                    "a.weight, one Parameter reached from two modules",
                    "a tied Parameter is one object; ask the model for its parameters in a way that visits "
                    "each Parameter object once (read the docs of Module.named_parameters)",
                )
            if any(not p.requires_grad for p in params):
                raise AssertionError(
                    f"the {label} group holds frozen parameters (requires_grad=False): "
                    f"{_names(model, [p for p in params if not p.requires_grad])}; leave them out"
                )
        want = _decay_param_groups(model, wd)
        want_decay, want_no = ({id(p) for p in g["params"]} for g in want)
        got_decay, got_no = {id(p) for p in decay}, {id(p) for p in no_decay}
        if got_decay & got_no:
            raise AssertionError(
                f"{_names(model, [p for p in decay if id(p) in got_no])} appear in both groups; "
                "torch.optim refuses that ('some parameters appear in more than one parameter group')"
            )
        if got_decay != want_decay or got_no != want_no:
            norm_in_decay = [p for p in decay if p.ndim < 2]
            if norm_in_decay:
                raise Hint(
                    f"the decay group holds 1-D parameters {_names(model, norm_in_decay)}: the scales of BatchNorm, "
                    "LayerNorm and RMSNorm and PReLU's slopes are not matrices either, whatever their names",
                    "the rule in the task is about shape: decide by each tensor's number of dimensions "
                    "(Tensor.ndim), not by its name or its module's type",
                )
            missing = [p for p in model.parameters() if p.requires_grad and id(p) not in got_decay | got_no]
            if missing:
                raise AssertionError(f"these trainable parameters are in neither group: {_names(model, missing)}")
            raise AssertionError(
                f"decay group should be {_names(model, want[0]['params'])} and no-decay "
                f"{_names(model, want[1]['params'])}; you gave {_names(model, decay)} and {_names(model, no_decay)}"
            )
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            optimizer = torch.optim.AdamW([{**g, "params": ps} for g, ps in zip(groups, (decay, no_decay))], lr=1e-3)
        if [g["weight_decay"] for g in optimizer.param_groups] != [wd, 0.0] or not math.isclose(
            optimizer.param_groups[0]["lr"], 1e-3
        ):
            raise AssertionError("torch.optim.AdamW did not take the groups as expected")
