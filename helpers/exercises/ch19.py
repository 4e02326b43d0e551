"""Exercises of chapter 19 (custom autograd functions and operators): checkers and reference solutions."""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd import Function
from torch.autograd.function import BackwardCFunction
from torch.autograd.gradcheck import GradcheckError

from . import Hint, Shortcut, exercise

# --------------------------------------------------------------------------
# 19.logsumexp
# --------------------------------------------------------------------------


class _LogSumExp(Function):
    """log(sum(exp(x))) over the last dimension, stable for any finite input.

    Forward: ``m + log(sum(exp(x - m)))`` with ``m`` the row maximum, so no
    ``exp`` sees a positive argument. Backward: d lse / d x_i = softmax(x)_i
    = ``exp(x_i - lse)``, computed from the saved output (no overflow either),
    times the incoming gradient broadcast over the last dimension.
    A fully masked row (every entry ``-inf``) gives ``-inf``, as
    ``torch.logsumexp`` does, and a gradient of 0 for that row (where
    ``torch.logsumexp``'s backward gives NaN, which would poison a whole batch).
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
        out = out.unsqueeze(-1)
        masked = torch.isneginf(out)  # a row of -inf: exp(-inf - (-inf)) would be NaN; its gradient is 0
        weights = torch.exp(x - torch.where(masked, torch.zeros_like(out), out))
        return grad_out.unsqueeze(-1) * torch.where(masked, torch.zeros_like(weights), weights)


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


_LSE_SHORTCUTS = (  # a Shortcut's message names it, e.g. "torch.logsumexp does it for you"
    "torch.logsumexp",
    "torch.special.logsumexp",
    Shortcut("torch.ops.aten.logsumexp", reached=True),  # any route to the ATen op (x.logsumexp too)
    # the last entry of a cumulative log-sum-exp along the dimension is the log-sum-exp itself
    "torch.logcumsumexp",
    Shortcut("torch.ops.aten.logcumsumexp", reached=True),
)


def _outside_backward(args, kwargs) -> bool:
    """True unless autograd's engine is running a backward (a softmax there is the derivative, allowed)."""
    return torch._C._current_graph_task_id() == -1


_LSE_FORWARD_SHORTCUTS = (  # in the forward only: lse(x) = x_i - log_softmax(x)_i, or log(1 / softmax(x)_i) + x_i
    # reached=True: torch.log_softmax, F.log_softmax, x.log_softmax and torch.special.* all run these ATen ops
    Shortcut("torch.ops.aten._log_softmax", reached=True, when=_outside_backward,
             does="`log_softmax` in the forward (lse(x) = x_i - log_softmax(x)_i)"),
    Shortcut("torch.ops.aten._softmax", reached=True, when=_outside_backward,
             does="`softmax` in the forward (lse(x) = x_i - log(softmax(x)_i))"),
)

_LSE_BACKWARD_SHORTCUTS = (  # a backward that re-runs the forward under autograd is not hand-written
    Shortcut("torch.autograd.grad", does="`torch.autograd.grad` (autograd differentiating for you)"),
    Shortcut("torch.autograd.backward", does="`torch.autograd.backward` (autograd differentiating for you)"),
    Shortcut("torch.Tensor.backward", does="`Tensor.backward` (autograd differentiating for you)"),
    # The two above are seen by the torch-function mode, which is off while the checker's own autograd.grad
    # runs the backward; a backward must switch grad mode on to build a graph, and that is seen: the classes
    # below are patched, not dispatched.
    Shortcut("torch.enable_grad", does="`torch.enable_grad` (autograd recording a graph to differentiate for you)"),
    Shortcut("torch.set_grad_enabled", when=lambda args, kwargs: bool(args[0] if args else kwargs.get("mode")),
             does="`torch.set_grad_enabled(True)` (autograd recording a graph to differentiate for you)"),
    Shortcut("torch.func.vjp", does="`torch.func.vjp` (autograd differentiating for you)"),
    Shortcut("torch.func.grad", does="`torch.func.grad` (autograd differentiating for you)"),
)


def _tensor_attributes(ctx) -> list[str]:
    """Names of the ctx attributes that hold tensors (or lists and tuples of them)."""
    found = []
    for name, value in vars(ctx).items():
        items = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(v, torch.Tensor) for v in items):
            found.append(name)
    return found


@exercise(
    "19.logsumexp",
    "write LogSumExp, a torch.autograd.Function (current style: forward(x), setup_context, backward) computing "
    "log(sum(exp(x))) over the last dimension, stable for inputs like 1000 or -1000, without torch.logsumexp, "
    "log_softmax or softmax in the forward; a hand-written backward (no torch.autograd.grad or .backward() in it); "
    "tensors saved with ctx.save_for_backward, not as ctx attributes; a fully masked row (all -inf) gives -inf and "
    "a gradient of 0.",
    reference=_LogSumExp,
    shortcuts=_LSE_SHORTCUTS + _LSE_FORWARD_SHORTCUTS + _LSE_BACKWARD_SHORTCUTS,
    goal="the log-sum-exp and its backward",
    hint="log-sum-exp does not change when you take a constant out of every element and add it back outside "
         "the log; pick the constant so no exp can overflow. The derivative of lse is a function you met with "
         "cross-entropy, and the saved output gives it without any overflow.",
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
    stored = _tensor_attributes(out.grad_fn)  # the output's grad_fn is the ctx that setup_context received
    if stored:
        names = ", ".join(f"ctx.{name}" for name in stored)
        raise Hint(
            f"your Function keeps tensors as plain ctx attributes ({names}): such a tensor gets no version check "
            "(an in-place change gives a silently wrong gradient), and ctx.out = output makes a reference cycle "
            "output -> grad_fn (the ctx) -> output (section 3 and Pitfall 1 of this chapter)",
            "save tensors with ctx.save_for_backward(...) in setup_context and read them back in backward with "
            "ctx.saved_tensors; only non-tensors (shapes, flags, Python numbers) go on ctx as attributes",
        )
    want = torch.logsumexp(x.detach(), dim=-1)
    if out.shape != want.shape:
        hint = " (the summed dimension is still there)" if out.shape == (3, 1) else ""
        raise Hint(f"for x of shape [3, 5] the output should have shape [3], got {list(out.shape)}{hint}",
                   "keepdim=True keeps the summed dimension as size 1; remove it from the result (squeeze)")
    if not torch.allclose(out.detach(), want, atol=1e-10, rtol=1e-10):
        raise AssertionError("the forward values differ from torch.logsumexp(x, dim=-1) for ordinary inputs")
    for shape in ((5,), (2, 3, 4)):  # "over the last dimension", whatever the number of dimensions
        xs = torch.randn(*shape, generator=g, dtype=torch.float64)
        want_s = torch.logsumexp(xs, dim=-1)
        try:
            got = apply(xs)
        except (IndexError, RuntimeError) as err:
            raise Hint(f"for x of shape {list(shape)} your forward raised {type(err).__name__}: {err}",
                       "reduce over the last dimension (dim=-1), not a fixed dimension number") from None
        if got.shape != want_s.shape or not torch.allclose(got.detach(), want_s, atol=1e-10, rtol=1e-10):
            raise Hint(f"for x of shape {list(shape)} the output should be the log-sum-exp over the last dimension, "
                       f"shape {list(want_s.shape)}; got shape {list(got.shape)}",
                       "reduce over the last dimension (dim=-1), not a fixed dimension number")
    try:
        torch.autograd.gradcheck(apply, (x,), eps=1e-6, atol=1e-5)
    except GradcheckError as err:
        first = str(err).splitlines()[0]
        raise Hint(
            f"gradcheck (float64) rejects your backward ({first})",
            "the derivative of lse with respect to x_i is the softmax of the row at i; backward returns it "
            "times the incoming gradient, which has one value per row and needs a trailing dimension of size 1 "
            "to broadcast over the row (unsqueeze)",
        ) from None
    big = torch.tensor([[1000.0, 1000.0, -1000.0], [-1000.0, 0.0, 1000.0], [-1000.0, -1000.0, -1000.0]], requires_grad=True)
    out = apply(big)
    want = torch.logsumexp(big.detach().double(), dim=-1)
    if not torch.isfinite(out).all():
        raise Hint(
            f"for rows like [1000, 1000, -1000] your forward gives {out.detach().tolist()}: exp(1000) overflows "
            "in float32",
            "lse(x) = c + lse(x - c) for any constant c; choose c per row (the row maximum) so that every exp "
            "sees an argument <= 0",
        )
    if (out.detach().double() - want).abs().max() > 1e-3:
        raise AssertionError(f"for large inputs the forward gives {out.detach().tolist()}, expected {want.tolist()}")
    weights = torch.tensor([1.0, -2.0, 0.5])
    (grad,) = torch.autograd.grad(out, big, grad_outputs=weights)
    want_grad = weights[:, None].double() * torch.softmax(big.detach().double(), dim=-1)
    if not torch.isfinite(grad).all():
        raise Hint(
            "for large inputs your gradient has inf or NaN: something in the backward overflows",
            "compute the softmax from differences that are <= 0 (x minus the saved output, or minus the row "
            "maximum), never as exp(x) divided by a sum of exp(x)",
        )
    if (grad.double() - want_grad).abs().max() > 5e-4:  # float32 at |x| = 1000: lse carries ~1e-4 rounding
        raise AssertionError(f"for large inputs the gradient is {grad.tolist()}, expected {want_grad.tolist()}")
    inf = float("inf")
    masked = torch.tensor([[0.0, -inf, 1.0], [-inf, -inf, -inf]], requires_grad=True)
    try:
        out = apply(masked)
    except Exception as err:
        raise Hint(f"with a fully masked row [-inf, -inf, -inf] your forward raised {type(err).__name__}: {err}",
                   "the row maximum is -inf there; x - max is then NaN: replace a non-finite maximum by 0") from None
    want = torch.tensor([torch.logsumexp(masked[0].detach(), 0).item(), -inf])
    if not (torch.isclose(out[0].detach(), want[0], atol=1e-5) and torch.isneginf(out[1].detach())):
        raise Hint(
            f"for rows [0, -inf, 1] and [-inf, -inf, -inf] (a fully masked row) your forward gives "
            f"{out.detach().tolist()}, expected {want.tolist()} (the sum of exp over an all -inf row is 0, and "
            "log 0 = -inf, as torch.logsumexp gives)",
            "with every entry -inf the row maximum is -inf and x - max is -inf - (-inf) = NaN: use 0 as the "
            "shift when the maximum is not finite",
        )
    (grad,) = torch.autograd.grad(out, masked, grad_outputs=torch.ones(2))
    want_grad = torch.tensor([torch.softmax(masked[0].detach(), 0).tolist(), [0.0, 0.0, 0.0]])
    if not torch.isfinite(grad).all() or (grad - want_grad).abs().max() > 1e-5:
        raise Hint(
            f"for rows [0, -inf, 1] and [-inf, -inf, -inf] your gradient is {grad.tolist()}, expected "
            f"{want_grad.tolist()}: a fully masked row has no element with any weight, so its gradient is 0 "
            "(a NaN there would spread to every parameter)",
            "exp(x - lse) is exp(-inf - (-inf)) = NaN on that row; select 0 there (torch.where on the saved "
            "output being -inf)",
        )


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
    "torch.library.opcheck passes (the checker also calls it on device='meta' tensors).",
    reference=_pairwise_sqdist_fake,
    hint="A fake kernel reads only metadata: the output's shape comes from the inputs' shapes (one entry "
         "per pair of rows), and its dtype and device from the inputs, like the softplus fake kernel of "
         "section 8. Create it with one of an input's new_* methods, which keep its dtype and device; a "
         "plain torch.empty defaults to float32 on the CPU.",
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
                raise Hint(
                    f"on tensors without data your fake kernel raised {type(err).__name__}: {err}",
                    "a fake kernel must not read values (.numpy(), .item(), printing): compute only the output's "
                    "shape, dtype and device, e.g. with a new_* method of an input",
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
            raise Hint(
                f"for {dtype} inputs the op returns {dtype}, your fake kernel says {out.dtype}",
                "torch.empty defaults to float32; a new_* method of an input (x.new_empty) keeps its dtype and device",
            )
    for dtype in (torch.float32, torch.float64):  # the device: meta tensors are not on the CPU
        x = torch.empty(4, 3, dtype=dtype, device="meta")
        y = torch.empty(6, 3, dtype=dtype, device="meta")
        out = candidate(x, y)
        if not isinstance(out, torch.Tensor) or out.device != x.device or out.dtype != dtype or tuple(out.shape) != (4, 6):
            got = f"{out.dtype} [{', '.join(map(str, out.shape))}] on {out.device}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise Hint(
                f"for {dtype} inputs [4, 3] and [6, 3] on device 'meta' the op returns {dtype} [4, 6] on meta, "
                f"your fake kernel says {got}",
                "the output lives on the inputs' device (a GPU tensor gives a GPU output): torch.empty without "
                "device= makes a CPU tensor; a new_* method of an input (x.new_empty) keeps its dtype and device",
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
