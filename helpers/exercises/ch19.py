"""Exercises of chapter 19 (custom autograd functions and operators): checkers and reference solutions."""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd import Function
from torch.autograd.function import BackwardCFunction
from torch.autograd.gradcheck import GradcheckError

from . import exercise

# --------------------------------------------------------------------------
# 19.logsumexp
# --------------------------------------------------------------------------


class _LogSumExp(Function):
    """log(sum(exp(x))) over the last dimension, stable for any finite input.

    Forward: ``m + log(sum(exp(x - m)))`` with ``m`` the row maximum, so no
    ``exp`` sees a positive argument. Backward: d lse / d x_i = softmax(x)_i
    = ``exp(x_i - lse)``, computed from the saved output (no overflow either),
    times the incoming gradient broadcast over the last dimension.
    Shapes: ``x`` [..., n] -> [...].
    """

    @staticmethod
    def forward(x):
        m = x.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row of -inf: keep exp(x - m) defined
        return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x, output)

    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return grad_out.unsqueeze(-1) * torch.exp(x - out.unsqueeze(-1))


def _as_apply(candidate):
    """The callable to use: ``candidate.apply`` for a Function class, else the candidate itself."""
    if isinstance(candidate, type) and issubclass(candidate, Function):
        if candidate.setup_context is Function.setup_context:
            raise AssertionError(
                "write the current style: forward(x) without ctx, and a separate @staticmethod "
                "setup_context(ctx, inputs, output) that saves what backward needs"
            )
        return candidate.apply
    if isinstance(candidate, type):
        raise AssertionError(f"LogSumExp should subclass torch.autograd.Function; got a plain class {candidate.__name__}")
    return candidate


@exercise(
    "19.logsumexp",
    "write LogSumExp, a torch.autograd.Function (current style: forward(x), setup_context, backward) computing "
    "log(sum(exp(x))) over the last dimension, stable for inputs like 1000 or -1000, with a hand-written backward.",
    reference=_LogSumExp,
)
def _test_logsumexp(candidate) -> None:
    apply = _as_apply(candidate)
    g = torch.Generator().manual_seed(19)
    x = torch.randn(3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    out = apply(x)
    if not isinstance(out, torch.Tensor):
        raise AssertionError(f"return one tensor from forward; got {type(out).__name__}")
    if not isinstance(out.grad_fn, BackwardCFunction):
        raise AssertionError(
            "the output was not made by a custom autograd.Function (its grad_fn is "
            f"{type(out.grad_fn).__name__}): subclass torch.autograd.Function and call YourClass.apply(x), "
            "not Function.forward or torch.logsumexp"
        )
    want = torch.logsumexp(x.detach(), dim=-1)
    if out.shape != want.shape:
        hint = " (keepdim=True left the summed dimension in place: squeeze it)" if out.shape == (3, 1) else ""
        raise AssertionError(f"for x of shape [3, 5] the output should have shape [3], got {list(out.shape)}{hint}")
    if not torch.allclose(out.detach(), want, atol=1e-10, rtol=1e-10):
        raise AssertionError("the forward values differ from torch.logsumexp(x, dim=-1) for ordinary inputs")
    try:
        torch.autograd.gradcheck(apply, (x,), eps=1e-6, atol=1e-5)
    except GradcheckError as err:
        first = str(err).splitlines()[0]
        raise AssertionError(
            f"gradcheck (float64) rejects your backward ({first}). d lse/dx_i is softmax(x)_i = exp(x_i - lse); "
            "multiply it by grad_out, with grad_out.unsqueeze(-1) so it broadcasts over the last dimension"
        ) from None
    big = torch.tensor([[1000.0, 1000.0, -1000.0], [-1000.0, 0.0, 1000.0], [-1000.0, -1000.0, -1000.0]], requires_grad=True)
    out = apply(big)
    want = torch.logsumexp(big.detach().double(), dim=-1)
    if not torch.isfinite(out).all():
        raise AssertionError(
            f"for rows like [1000, 1000, -1000] your forward gives {out.detach().tolist()}: exp(1000) overflows. "
            "Subtract the row maximum m first: lse = m + log(sum(exp(x - m)))"
        )
    if (out.detach().double() - want).abs().max() > 1e-3:
        raise AssertionError(f"for large inputs the forward gives {out.detach().tolist()}, expected {want.tolist()}")
    weights = torch.tensor([1.0, -2.0, 0.5])
    (grad,) = torch.autograd.grad(out, big, grad_outputs=weights)
    want_grad = weights[:, None].double() * torch.softmax(big.detach().double(), dim=-1)
    if not torch.isfinite(grad).all():
        raise AssertionError(
            "for large inputs your gradient has inf or NaN: compute the softmax as exp(x - lse) (using the saved "
            "output) or from x - max, never exp(x) / sum(exp(x))"
        )
    if (grad.double() - want_grad).abs().max() > 5e-4:  # float32 at |x| = 1000: lse carries ~1e-4 rounding
        raise AssertionError(f"for large inputs the gradient is {grad.tolist()}, expected {want_grad.tolist()}")


# --------------------------------------------------------------------------
# 19.fake_kernel
# --------------------------------------------------------------------------


def _pairwise_sqdist_fake(x, y):
    """Fake (meta) kernel of ``pairwise_sqdist(x [N, D], y [M, D]) -> [N, M]``: metadata only, no data."""
    return x.new_empty(x.shape[0], y.shape[0])


def _numpy_pairwise_sqdist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared distances between the rows of x [N, D] and y [M, D], computed in NumPy: [N, M], x's dtype."""
    a, b = x.numpy(force=True), y.numpy(force=True)
    out = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
    return torch.from_numpy(np.maximum(out, 0.0).astype(a.dtype)).to(x.device)


def _define_op(fake):
    """Define course19::exercise_pairwise_sqdist (redefining replaces it) with ``fake`` as its fake kernel."""

    @torch.library.custom_op("course19::exercise_pairwise_sqdist", mutates_args=())
    def pairwise_sqdist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return _numpy_pairwise_sqdist(x, y)

    pairwise_sqdist.register_fake(fake)
    return pairwise_sqdist


@exercise(
    "19.fake_kernel",
    "write the fake kernel of a NumPy custom op pairwise_sqdist(x [N, D], y [M, D]) -> [N, M]: a function that, "
    "given tensors without data, returns an empty tensor with the output's shape, dtype and device, so that "
    "torch.library.opcheck passes.",
    reference=_pairwise_sqdist_fake,
)
def _test_fake_kernel(candidate) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    cases = [((4, 3), (6, 3), torch.float32), ((5, 2), (2, 2), torch.float64), ((1, 7), (3, 7), torch.float32)]
    for (n, d), (m, _), dtype in cases:
        with FakeTensorMode() as mode:
            x = torch.empty(n, d, dtype=dtype)
            y = torch.empty(m, d, dtype=dtype)
            try:
                out = candidate(x, y)
            except NotImplementedError:
                raise
            except Exception as err:
                raise AssertionError(
                    f"on tensors without data your fake kernel raised {type(err).__name__}: {err}. A fake kernel "
                    "must not read values (.numpy(), .item(), printing): compute only the output's shape, dtype "
                    "and device, e.g. with x.new_empty(...)"
                ) from None
        del mode
        if not isinstance(out, torch.Tensor):
            raise AssertionError(f"return a tensor (an empty one with the right metadata); got {type(out).__name__}")
        if out is x or out is y:
            raise AssertionError("return a new tensor, not one of the inputs: the real op returns fresh memory")
        if tuple(out.shape) != (n, m):
            raise AssertionError(
                f"for x [{n}, {d}] and y [{m}, {d}] the op returns shape [{n}, {m}] (one distance per pair of "
                f"rows), your fake kernel says {list(out.shape)}"
            )
        if out.dtype != dtype:
            raise AssertionError(
                f"for {dtype} inputs the op returns {dtype}, your fake kernel says {out.dtype}: torch.empty "
                "defaults to float32; x.new_empty(...) keeps x's dtype and device"
            )
    op = _define_op(candidate)
    g = torch.Generator().manual_seed(19)
    args = (torch.randn(4, 3, generator=g), torch.randn(6, 3, generator=g))
    try:
        results = torch.library.opcheck(op, args)
    except Exception as err:
        raise AssertionError(f"torch.library.opcheck fails: {str(err).splitlines()[0]}") from None
    failed = [name for name, status in results.items() if status != "SUCCESS"]
    assert not failed, f"opcheck reports {failed}"
