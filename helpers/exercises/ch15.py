"""Exercises of chapter 15 (mixed precision, stability, reproducibility): checkers and reference solutions."""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import Hint, exercise

# --------------------------------------------------------------------------
# 15.float_limits
# --------------------------------------------------------------------------


def _float_limits(exponent_bits: int, mantissa_bits: int) -> tuple[float, float, float]:
    """Largest finite value, smallest normal value and machine epsilon of a binary float format.

    Args:
        exponent_bits: width ``e`` of the exponent field (5 for float16, 8 for
            bfloat16 and float32, 11 for float64).
        mantissa_bits: stored fraction bits ``m``, without the implicit leading
            1 (10 for float16, 7 for bfloat16, 23 for float32, 52 for float64).

    Returns:
        ``(max, smallest_normal, eps)`` as Python floats, for an IEEE 754-style
        format whose all-ones exponent is reserved for inf and NaN (IEEE 754-2008,
        section 3.4): bias ``b = 2**(e-1) - 1``; ``max = (2 - 2**-m) * 2**b``;
        ``smallest_normal = 2**(1 - b)``; ``eps = 2**-m``, the gap between 1 and
        the next representable number. They match ``torch.finfo``'s ``max``,
        ``smallest_normal`` and ``eps``.
    """
    bias = 2 ** (exponent_bits - 1) - 1
    largest = (2.0 - 2.0**-mantissa_bits) * 2.0**bias
    return largest, 2.0 ** (1 - bias), 2.0**-mantissa_bits


def _as_float(value, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AssertionError(f"{what} should be a number, got {value!r}")
    return float(value)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


class _LookedUp(AssertionError):
    """The answer called a library's table of float limits (torch.finfo, numpy.finfo, ml_dtypes.finfo)."""


def _library_dir(module) -> str:
    return str(Path(module.__file__).resolve().parent)


@contextlib.contextmanager
def _no_finfo(candidate):
    """While the candidate runs, refuse its calls of ``torch.finfo``, ``numpy.finfo`` and ``ml_dtypes.finfo``.

    ``torch.finfo`` is a C type, which the framework's class shortcuts cannot patch, so the names are rebound
    here: on their modules and wherever the answer's globals (or the notebook's) hold them. A call from inside
    torch, numpy or ml_dtypes is the library's own business and passes. Yields the list of refused calls, so
    an answer that catches the refusal (a lookup with the formula as fallback) still fails.
    """
    import numpy as np

    modules = [torch, np]
    if "ml_dtypes" in sys.modules or importlib.util.find_spec("ml_dtypes") is not None:
        modules.append(importlib.import_module("ml_dtypes"))
    library_dirs = tuple(_library_dir(m) for m in modules)
    used: list[str] = []

    def refusing(original, label):
        def finfo(*args, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(library_dirs):
                return original(*args, **kwargs)
            used.append(label)
            raise _LookedUp(label)

        return finfo

    wrappers = {id(m.finfo): (m.finfo, refusing(m.finfo, f"{m.__name__}.finfo")) for m in modules}
    spaces = [vars(m) for m in modules]
    for defining in ("numpy._core.getlimits", "numpy.core.getlimits"):  # where numpy defines finfo
        if defining in sys.modules:
            spaces.append(vars(sys.modules[defining]))
    spaces.append(getattr(candidate, "__globals__", {}))
    if "__main__" in sys.modules:
        spaces.append(vars(sys.modules["__main__"]))
    rebound = []
    try:
        for space in spaces:
            for name, value in list(space.items()):
                pair = wrappers.get(id(value))
                if pair is not None and pair[0] is value:
                    space[name] = pair[1]
                    rebound.append((space, name, *pair))
        yield used
    finally:
        for space, name, original, wrapper in rebound:
            if space.get(name) is wrapper:
                space[name] = original


def _call_without_lookup(candidate, e: int, m: int, where: str):
    with _no_finfo(candidate) as used:
        try:
            result = candidate(e, m)
        except _LookedUp:
            result = None
    if used:
        raise Hint(
            f"{where}: your code looked the limits up with `{used[0]}`. This exercise asks you to compute them "
            "yourself from the two bit counts (the checker compares your numbers with torch.finfo).",
            "Write the bias, the largest finite value, the smallest normal value and eps as formulas in "
            "exponent_bits and mantissa_bits; every format, named or made up, then follows from the same lines.",
        )
    return result


@exercise(
    "15.float_limits",
    "return (max, smallest_normal, eps) of a binary floating-point format with exponent_bits exponent bits and "
    "mantissa_bits stored fraction bits, as torch.finfo reports them (float16 is (5, 10), bfloat16 (8, 7)), computed "
    "from the bit counts: no lookup in torch.finfo, numpy.finfo or ml_dtypes.finfo.",
    reference=_float_limits,
    hint="Work out which exponent values a normal number may use once the all-zeros and all-ones exponent "
         "fields are reserved, and subtract the bias, as section 'Three float formats' does. The largest "
         "finite value also has every fraction bit set, and eps is the gap from 1.0 to the next number, "
         "the value of the last fraction bit at exponent 0; compute everything from the two bit counts, "
         "not by looking up torch.finfo.",
)
def _test_float_limits(candidate) -> None:
    formats = [
        ("float16", 5, 10, torch.float16),
        ("bfloat16", 8, 7, torch.bfloat16),
        ("float32", 8, 23, torch.float32),
        ("float64", 11, 52, torch.float64),
        ("float8_e5m2", 5, 2, torch.float8_e5m2),
    ]
    for name, e, m, dtype in formats:
        info = torch.finfo(dtype)
        result = _call_without_lookup(candidate, e, m, f"{name} (exponent_bits={e}, mantissa_bits={m})")
        try:
            got_max, got_tiny, got_eps = result
        except (TypeError, ValueError) as exc:
            raise AssertionError(f"return a tuple (max, smallest_normal, eps); for {name} you returned {result!r}") from exc
        got_max = _as_float(got_max, "max")
        got_tiny = _as_float(got_tiny, "smallest_normal")
        got_eps = _as_float(got_eps, "eps")
        bias = 2 ** (e - 1) - 1
        where = f"{name} (exponent_bits={e}, mantissa_bits={m})"
        if not _close(got_eps, info.eps):
            if _close(got_eps, info.eps / 2):
                raise AssertionError(
                    f"{where}: eps = {got_eps:g} is half of torch.finfo's {info.eps:g}: that is the largest rounding "
                    f"error (the unit roundoff). eps is the gap from 1.0 to the next representable number: which "
                    f"stored fraction bit changes between the two?"
                )
            raise AssertionError(f"{where}: eps should be {info.eps:g} (the gap from 1.0 to the next number), got {got_eps:g}")
        if not _close(got_tiny, info.smallest_normal):
            if _close(got_tiny, 2.0**-bias):
                raise AssertionError(
                    f"{where}: smallest_normal = {got_tiny:g} is a factor 2 too small: the all-zeros exponent field "
                    f"is reserved for zero and subnormals, so the smallest normal number uses the next field value"
                )
            raise AssertionError(f"{where}: smallest_normal should be {info.smallest_normal:g}, got {got_tiny:g}")
        if not _close(got_max, info.max):
            if _close(got_max, 2.0**bias):
                raise AssertionError(
                    f"{where}: max = {got_max:g} forgets the mantissa: the largest finite number has the largest "
                    f"significand too, 1.111...1 in binary with all m fraction bits set; what is its value?"
                )
            if _close(got_max, 2.0 * 2.0**bias) or _close(got_max, (2.0 - 2.0**-m) * 2.0 ** (bias + 1)):
                raise AssertionError(
                    f"{where}: {got_max:g} uses the all-ones exponent field, which IEEE formats reserve for inf and "
                    f"NaN; the largest finite number uses the field value just below it"
                )
            raise AssertionError(f"{where}: max should be {info.max:g}, got {got_max:g}")
    e, m = 6, 9  # a made-up format: the formula, not a lookup table
    want = _float_limits(e, m)
    got = tuple(_as_float(v, "each value") for v in _call_without_lookup(candidate, e, m, f"a made-up format ({e}, {m})"))
    assert all(_close(a, b) for a, b in zip(got, want)), (
        f"for a made-up format with exponent_bits={e}, mantissa_bits={m} expected {want}, got {got}: "
        "compute from the bit counts rather than looking up torch.finfo"
    )


# --------------------------------------------------------------------------
# 15.accumulate_gradients
# --------------------------------------------------------------------------


def _accumulate_gradients(model: nn.Module, loss_fn, micro_batches) -> None:
    """Fill each parameter's ``.grad`` with the gradient of the mean loss over all micro-batches together.

    Args:
        model: the network (its parameters are not changed, only their ``.grad``).
        loss_fn: ``loss_fn(outputs, targets)`` returns the **mean** loss over
            the samples it is given (like ``F.cross_entropy``).
        micro_batches: a list of ``(inputs, targets)`` pairs, possibly of
            different sizes ``n_i``, ``N = sum(n_i)``.

    Each micro-batch's mean loss is weighted by ``n_i / N`` before
    ``backward()``, so that the accumulated ``.grad`` equals the gradient of
    one batch of all ``N`` samples (for a model without batch-dependent
    layers such as BatchNorm). Gradients present before the call are cleared
    first.
    """
    model.zero_grad(set_to_none=True)
    total = sum(len(targets) for _, targets in micro_batches)
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets) * (len(targets) / total)
        loss.backward()


def _grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()
    ])


def _accumulation_case(sizes: list[int], seed: int):
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    n = sum(sizes)
    x = torch.randn(n, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=g)
    chunks = list(zip(x.split(sizes), y.split(sizes)))
    return model, x, y, chunks


@exercise(
    "15.accumulate_gradients",
    "write accumulate_gradients(model, loss_fn, micro_batches): clear the old gradients, then run forward and "
    "backward on each (inputs, targets) micro-batch so that the summed .grad equals the gradient of the mean loss "
    "over all samples as one big batch, also when the micro-batches have different sizes. No optimizer step.",
    reference=_accumulate_gradients,
    hint="backward() adds into .grad (section 'Gradient accumulation'), so clear the gradients once at the "
         "start and let each micro-batch's backward add its part, one micro-batch per forward pass. The "
         "only question is how much to weight each micro-batch's mean loss so that every sample counts as "
         "it does in the mean over all samples: dividing by the number of micro-batches is right only when "
         "they all have the same size.",
)
def _test_accumulate_gradients(candidate) -> None:
    for label, sizes in (("4 micro-batches of 8", [8, 8, 8, 8]), ("micro-batches of 20, 7 and 5", [20, 7, 5])):
        model, x, y, chunks = _accumulation_case(sizes, seed=len(sizes))
        params_before = [p.detach().clone() for p in model.parameters()]
        # the big batch, as the target
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        want = _grads(model)
        # what the common mistakes would produce
        model.zero_grad()
        for inputs, targets in chunks:
            F.cross_entropy(model(inputs), targets).backward()
        unscaled = _grads(model)
        model.zero_grad()
        F.cross_entropy(model(chunks[-1][0]), chunks[-1][1]).backward()
        last_only = _grads(model)
        divided_by_k = unscaled / len(sizes)
        # stale gradients that a correct answer must clear first
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.25)
        stale = _grads(model)
        largest, seen = max(sizes), []

        def at_most_one_micro_batch(module, args, largest=largest, seen=seen, label=label):
            seen.append(len(args[0]))
            if len(args[0]) > largest:
                raise Hint(
                    f"{label}: one forward pass saw {len(args[0])} samples, more than the largest micro-batch "
                    f"({largest}). Accumulation exists because the big batch does not fit in memory",
                    "run forward and backward on each micro-batch on its own, and let backward() add into .grad",
                )

        handle = model.register_forward_pre_hook(at_most_one_micro_batch)
        try:
            result = candidate(model, F.cross_entropy, [(a.clone(), b.clone()) for a, b in chunks])
        finally:
            handle.remove()
        del result  # the return value is not used
        if sorted(seen) != sorted(sizes):
            raise AssertionError(
                f"{label}: the model ran forward on batches of sizes {seen}; expected one forward pass per "
                f"micro-batch, of sizes {sizes}"
            )
        if any(not torch.equal(p, q) for p, q in zip(model.parameters(), params_before)):
            raise AssertionError("the parameters changed: only accumulate .grad, do not take an optimizer step")
        if any(p.grad is None for p in model.parameters()):
            raise AssertionError(f"{label}: some parameters have no .grad; call backward() on every micro-batch's loss")
        got = _grads(model)

        def near(a: torch.Tensor, got: torch.Tensor = got) -> bool:
            return torch.allclose(got, a, rtol=1e-9, atol=1e-12)

        if near(want):
            continue
        if near(want + stale) or near(divided_by_k + stale) or near(unscaled + stale):
            raise AssertionError(
                f"{label}: the gradients left over from before the call were added to yours; backward() "
                "accumulates into .grad, so clear it first (model.zero_grad())"
            )
        if near(unscaled):
            raise Hint(
                f"{label}: your gradient is the *sum* of the micro-batch gradients, about {len(sizes)}x too large",
                "backward() adds into .grad, while the big batch's loss is a mean over its samples, not a sum",
            )
        if near(last_only) or near(last_only / len(sizes)):
            raise AssertionError(
                f"{label}: only the last micro-batch's gradient is left: do not zero the gradients between "
                "micro-batches, only once before the first"
            )
        if near(divided_by_k):
            raise Hint(
                f"{label}: dividing each loss by the number of micro-batches is right only when they are all the "
                "same size",
                "in the big batch's mean every sample has the same weight; ask which weight a sample of a small "
                "micro-batch gets when its micro-batch's mean is divided by k",
            )
        raise AssertionError(
            f"{label}: the accumulated gradient differs from the big batch's by up to "
            f"{(got - want).abs().max().item():.3g}"
        )


# --------------------------------------------------------------------------
# 15.clip_grad_norm
# --------------------------------------------------------------------------


def _clip_grad_norm(parameters, max_norm: float) -> torch.Tensor:
    """Clip gradients by their global L2 norm, in place, like ``torch.nn.utils.clip_grad_norm_``.

    Args:
        parameters: an iterable of tensors (it may be a generator such as
            ``model.parameters()``, which can be read only once); those whose
            ``.grad`` is ``None`` are skipped.
        max_norm: the largest allowed global norm.

    Returns:
        The global norm **before** clipping, a 0-d tensor:
        ``sqrt(sum over parameters of ||grad||**2)``. When it exceeds
        ``max_norm`` every gradient is multiplied by
        ``max_norm / (total + 1e-6)`` (the same epsilon as PyTorch), so all keep
        their direction relative to each other; otherwise nothing changes.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coefficient)
    return total


def _clip_case(scale: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (3,), (2, 4), (5,)]
    params = [torch.zeros(s, requires_grad=True) for s in shapes]
    for p in params[:-1]:
        p.grad = torch.randn(p.shape, generator=g) * scale
    return params  # the last one has no gradient (e.g. a frozen or unused parameter)


@exercise(
    "15.clip_grad_norm",
    "write clip_grad_norm(parameters, max_norm): compute the global L2 norm of all the gradients (skip .grad None), "
    "scale every gradient in place by max_norm / (norm + 1e-6) when the norm exceeds max_norm, and return the norm "
    "before clipping, like torch.nn.utils.clip_grad_norm_. parameters may be a generator.",
    reference=_clip_grad_norm,
    shortcuts=("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm", "torch.nn.utils.get_total_norm",
               "torch.nn.utils.clip_grads_with_norm_"),
    goal="the clipping",
    hint="Read parameters once into a list of the gradients that exist, since a generator is empty the "
         "second time. Combine the per-tensor L2 norms into one global norm (root of the summed squares, "
         "not the sum of the norms), scale every gradient in place by one common factor only when that "
         "norm exceeds max_norm, as in the 'Gradient clipping' section, and return the norm from before "
         "the scaling.",
)
def _test_clip_grad_norm(candidate) -> None:
    for label, scale, max_norm in (("large gradients", 3.0, 1.0), ("small gradients", 0.05, 1.0), ("max_norm 2.5", 2.0, 2.5)):
        mine, theirs = _clip_case(scale, seed=1), _clip_case(scale, seed=1)
        want_norm = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
        per_param_ok = all(p.grad.norm() <= max_norm + 1e-5 for p in theirs[:-1])
        grad_objects = [p.grad for p in mine[:-1]]
        got_norm = candidate(iter(mine), max_norm)  # a one-shot iterator, like model.parameters()
        if got_norm is None:
            raise AssertionError("return the total norm (before clipping), as clip_grad_norm_ does")
        got_norm = _as_float(got_norm, "the returned norm")
        if mine[-1].grad is not None:
            raise AssertionError("a parameter whose .grad is None must be skipped, not given a gradient")
        if any(p.grad is not g for p, g in zip(mine[:-1], grad_objects)):
            raise AssertionError(
                f"{label}: a parameter's .grad is a new tensor after your call; clipping works in place, on the "
                "gradient tensors the parameters already hold (an optimizer or a hook may keep references to them)"
            )
        grads_equal = all(torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7) for a, b in zip(mine[:-1], theirs[:-1]))
        if not math.isclose(got_norm, want_norm.item(), rel_tol=1e-5):
            clipped_norm = math.sqrt(sum(p.grad.norm().item() ** 2 for p in mine[:-1]))
            if grads_equal and math.isclose(got_norm, clipped_norm, rel_tol=1e-4):
                raise AssertionError(
                    f"{label}: you returned the norm after clipping ({got_norm:.4g}); return the total norm "
                    f"before clipping ({want_norm.item():.4g}), which is what you want to log"
                )
            sum_of_norms = sum(p.grad.norm().item() for p in _clip_case(scale, seed=1)[:-1])
            if math.isclose(got_norm, sum_of_norms, rel_tol=1e-4):
                raise AssertionError(
                    f"{label}: {got_norm:.4g} is the sum of the per-parameter norms; the global norm is the square "
                    f"root of the sum of their *squares* ({want_norm.item():.4g})"
                )
            raise AssertionError(f"{label}: the total norm is {want_norm.item():.4g}, you returned {got_norm:.4g}")
        if grads_equal:
            continue
        unchanged = _clip_case(scale, seed=1)
        if all(torch.allclose(a.grad, b.grad) for a, b in zip(mine[:-1], unchanged[:-1])):
            raise Hint(
                f"{label}: the gradients were not clipped. If you read `parameters` twice (once for the norm, once "
                "to scale), a generator such as model.parameters() is empty the second time",
                "read the iterable only once and keep what you read",
            )
        if scale < 1 and want_norm.item() < max_norm:
            raise Hint(
                f"{label}: the norm {want_norm.item():.4g} is below max_norm {max_norm}, so the gradients must stay "
                "as they are, but yours changed: clipping only ever scales down",
                "the factor applied to the gradients is never larger than 1",
            )
        if per_param_ok and all(p.grad.norm() <= max_norm + 1e-5 for p in mine[:-1]):
            raise Hint(
                f"{label}: it looks as if each parameter was clipped on its own",
                "one factor, computed from the global norm, for all gradients keeps their directions relative to "
                "each other",
            )
        raise AssertionError(f"{label}: after clipping the gradients differ from clip_grad_norm_'s")
