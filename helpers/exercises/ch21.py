"""Exercises of chapter 21 (torch.func): checkers and reference solutions."""

from __future__ import annotations

import torch

from . import Hint, exercise

# --------------------------------------------------------------------------
# 21.clip_per_sample
# --------------------------------------------------------------------------


def _clip_per_sample(per_sample_grads: dict[str, torch.Tensor], max_norm: float) -> dict[str, torch.Tensor]:
    """The clipped, averaged gradient of DP-SGD (Abadi et al. 2016, "Deep Learning with Differential Privacy").

    Args:
        per_sample_grads: parameter name -> float tensor ``[B, *param_shape]``,
            one gradient per example (what ``vmap(grad(loss))`` returns).
        max_norm: the clipping bound C > 0.

    Returns:
        parameter name -> float tensor ``[*param_shape]``: each example's whole
        gradient (all parameters together, one L2 norm per example) is scaled
        by ``min(1, C / (norm + 1e-6))``, then the clipped gradients are
        averaged over the batch. The 1e-6 (as in Opacus) keeps an all-zero
        gradient finite. DP-SGD then adds Gaussian noise; that step is left out.
        The input is not modified.
    """
    norms = torch.stack([g.flatten(start_dim=1).norm(dim=1) for g in per_sample_grads.values()], dim=1).norm(dim=1)  # [B]
    factor = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # [B]
    return {name: torch.einsum("b,b...->...", factor, g) / len(factor) for name, g in per_sample_grads.items()}


def _norms(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.stack([g.flatten(start_dim=1).norm(dim=1) for g in grads.values()], dim=1).norm(dim=1)


@exercise(
    "21.clip_per_sample",
    "given per_sample_grads (a dict: name -> tensor [B, *shape], one gradient per example) and max_norm, clip each "
    "example's whole gradient (one L2 norm over all its parameters) to at most max_norm, then return the average "
    "over the batch (a dict: name -> tensor [*shape]), as DP-SGD does before adding noise.",
    reference=_clip_per_sample,
    shortcuts=(
        "torch.nn.utils.clip_grad_norm_",  # clips (and measures) the norm for you, whatever you loop over
        "torch.nn.utils.clip_grads_with_norm_",
        "torch.nn.utils.get_total_norm",
    ),
    goal="the per-example clipping",
    hint="Work per example along dimension 0: for each example, combine the squared norms of all its "
         "parameter tensors into one L2 norm, so that you get B norms (not one per tensor). Then scale "
         "each example by its own factor, never above 1, broadcast over the other dimensions of every "
         "tensor, and average over the batch last; build new tensors instead of scaling the input in "
         "place.",
)
def _test_clip_per_sample(candidate) -> None:
    g = torch.Generator().manual_seed(21)
    B = 6
    grads = {
        "layer.weight": torch.randn(B, 4, 3, generator=g, dtype=torch.float64),
        "layer.bias": torch.randn(B, 4, generator=g, dtype=torch.float64),
        "head.weight": torch.randn(B, 2, 4, generator=g, dtype=torch.float64),
        # convolution weights: per-sample gradients with 4 and 5 dimensions, so the batch factor must broadcast
        # over however many dimensions a parameter has
        "conv1d.weight": torch.randn(B, 2, 2, 3, generator=g, dtype=torch.float64),
        "conv2d.weight": torch.randn(B, 3, 2, 2, 2, generator=g, dtype=torch.float64),
    }
    # Give the examples very different sizes: some far above the bound, some below, one all zero.
    scale = torch.tensor([0.05, 0.3, 1.0, 4.0, 10.0, 0.0], dtype=torch.float64)
    grads = {k: v * scale.view(-1, *([1] * (v.dim() - 1))) for k, v in grads.items()}
    max_norm = 1.5
    original = {k: v.clone() for k, v in grads.items()}
    want = _clip_per_sample(grads, max_norm)
    got = candidate(grads, max_norm)
    if any(not torch.equal(grads[k], original[k]) for k in grads):
        raise AssertionError("leave per_sample_grads unchanged: build new tensors instead of scaling in place")
    if not isinstance(got, dict):
        raise AssertionError(f"return a dict name -> tensor, like per_sample_grads; got {type(got).__name__}")
    if set(got) != set(want):
        raise AssertionError(f"return one entry per parameter, with the same names {sorted(want)}; got {sorted(got)}")
    for name, value in got.items():
        if not isinstance(value, torch.Tensor):
            raise AssertionError(f"{name!r}: return tensors, got {type(value).__name__}")
        if value.shape == grads[name].shape:
            raise AssertionError(
                f"{name!r} still has the batch dimension {tuple(value.shape)}: after clipping, average over the "
                f"examples (dimension 0) to get one gradient {tuple(want[name].shape)}"
            )
        if value.shape != want[name].shape:
            raise AssertionError(f"{name!r}: expected shape {tuple(want[name].shape)}, got {tuple(value.shape)}")
        if not torch.isfinite(value).all():
            raise AssertionError(
                "the result has NaN or inf: one example's gradient is all zeros, so its norm is 0; divide by "
                "(norm + 1e-6) or clamp the norm from below before dividing"
            )

    def matches(expected):
        return all(torch.allclose(got[k].double(), expected[k], rtol=1e-4, atol=1e-8) for k in want)

    if matches(want):
        return
    # Name the mistake when we can.
    if matches({k: v * B for k, v in want.items()}):
        raise AssertionError("you summed the clipped gradients: average them over the batch (divide by B)")
    per_tensor = {}
    for k, v in grads.items():
        n = v.flatten(start_dim=1).norm(dim=1)
        f = (max_norm / (n + 1e-6)).clamp(max=1.0)
        per_tensor[k] = torch.einsum("b,b...->...", f, v) / B
    if matches(per_tensor):
        raise AssertionError(
            "you clipped each parameter tensor on its own. DP-SGD bounds each *example's* whole gradient: "
            "one norm per example, over all parameters together (the square root of the sum of the squared "
            "norms of its tensors)"
        )
    mean = {k: v.mean(dim=0) for k, v in grads.items()}
    total = torch.sqrt(sum(m.pow(2).sum() for m in mean.values()))
    clipped_mean = {k: m * min(1.0, max_norm / (total.item() + 1e-6)) for k, m in mean.items()}
    if matches(clipped_mean) or matches(mean):
        raise AssertionError(
            "you clipped (or kept) the batch-mean gradient, as clip_grad_norm_ does. Clip each example's gradient "
            "first, so no single example can move the model by more than max_norm, then average"
        )
    norms = _norms(grads)
    always = (max_norm / (norms + 1e-6)).clamp(max=1e12)
    scaled_up = {k: torch.einsum("b,b...->...", always, v) / B for k, v in grads.items()}
    if matches(scaled_up):
        raise AssertionError(
            "you scaled every example to norm max_norm, also the small ones. Clipping only shrinks: multiply by "
            "min(1, max_norm / norm)"
        )
    raise AssertionError("the clipped average differs from the reference: for each example compute one norm over all its "
                         "tensors, scale by min(1, max_norm / (norm + 1e-6)), then average over the batch")


# --------------------------------------------------------------------------
# 21.hvp
# --------------------------------------------------------------------------


def _hvp(f, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The Hessian-vector product H(x) v of a scalar function, without building H.

    Args:
        f: a function of one tensor ``x`` (any shape) returning a scalar tensor.
        x: the point, float tensor of any shape.
        v: the direction, same shape as ``x``.

    Returns:
        ``H(x) v`` with the shape of ``x``, where H is the Hessian of ``f`` at
        ``x`` (x flattened). Forward-over-reverse: the directional derivative,
        along ``v``, of the gradient function (``jvp`` of ``grad(f)``). It costs
        a small constant times one gradient, whatever the size of ``x``
        (Pearlmutter 1994, "Fast exact multiplication by the Hessian").
    """
    from torch.func import grad, jvp

    return jvp(grad(f), (x,), (v,))[1]


HVP_LARGE_N = 100_000  # elements of x in the large case: its Hessian would have 10^10 entries (80 GB in float64)


def _hvp_cases():
    """(label, f, x, v, expected H v or None for "compare with the full Hessian"), all float64."""
    g = torch.Generator().manual_seed(2121)
    A = torch.randn(5, 5, generator=g, dtype=torch.float64)
    W = torch.randn(3, 4, generator=g, dtype=torch.float64)
    w = torch.randn(8, generator=g, dtype=torch.float64)
    w_large = torch.randn(HVP_LARGE_N, generator=g, dtype=torch.float64) / HVP_LARGE_N**0.5
    x_large = torch.randn(HVP_LARGE_N, generator=g, dtype=torch.float64)
    v_large = torch.randn(HVP_LARGE_N, generator=g, dtype=torch.float64)
    # H of the large f is diag(-9 sin(3x)) + w w^T: its product with v, without the matrix
    large_want = -9 * torch.sin(3 * x_large) * v_large + w_large * (w_large @ v_large)
    return [
        ("a quadratic 0.5 x^T A x with a non-symmetric A", lambda x: 0.5 * x @ A @ x,
         torch.randn(5, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64), None),
        ("the Rosenbrock function", lambda x: (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum(),
         torch.randn(6, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64), None),
        ("log-sum-exp of a matrix-shaped x", lambda x: torch.logsumexp((W * x).flatten(), dim=0) + (x ** 3).sum(),
         torch.randn(3, 4, generator=g, dtype=torch.float64), torch.randn(3, 4, generator=g, dtype=torch.float64), None),
        # large gradient (1e6) and large higher derivatives (sin(10 x)): finite differences of the gradient
        # are off by 1e-5 or more for every step size, far outside the tolerance
        ("1e6 * sum(x) + sum(sin(10 x)) + (w . x)^2 / 2", lambda x: 1e6 * x.sum() + torch.sin(10 * x).sum() + 0.5 * (w @ x) ** 2,
         torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64), None),
        (f"sum(sin(3 x)) + (w . x)^2 / 2 with x of {HVP_LARGE_N:,} elements",
         lambda x: torch.sin(3 * x).sum() + 0.5 * (w_large @ x) ** 2, x_large, v_large, large_want),
    ]


_HVP_SHORTCUTS = (
    "torch.func.hessian", "torch.func.jacfwd", "torch.func.jacrev",  # build (blocks of) the Hessian
    "torch.func.vjp", "torch.autograd.grad",  # reverse over reverse, where the task asks for forward over reverse
    "torch.autograd.functional.*",  # hvp, vhp, hessian: the answer in one call
)


class _ModeProbe(torch.overrides.TorchFunctionMode):
    """Sees how the learner's hvp differentiates: forward mode, or reverse over reverse.

    ``dual``: a forward-mode dual tensor was made (``torch._make_dual``: what
    ``torch.func.jvp``, ``torch.func.linearize`` and ``torch.autograd.forward_ad.make_dual``
    all issue). ``backward``: ``Tensor.backward`` was called (``double_backward``: with
    ``create_graph=True``).
    ``reverse_levels``: the most ``torch.func.grad``-like (reverse-mode) transforms active
    at once while ``f`` ran (2 or more: reverse over reverse). ``reverse_over_forward``: while
    ``f`` ran, a reverse-mode transform enclosed a forward-mode one (``grad`` of a ``jvp``): exact,
    but the other order, so a ``jvp`` run on the side cannot pass for forward over reverse.
    """

    def __init__(self):
        super().__init__()
        self.dual = False
        self.double_backward = False
        self.backward = False
        self.reverse_levels = 0
        self.reverse_over_forward = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "_make_dual":
            self.dual = True
        if name == "backward":
            self.backward = True  # ordinary autograd's reverse mode, run on the gradient
            if kwargs.get("create_graph") or (len(args) > 3 and args[3]):
                self.double_backward = True
        return func(*args, **kwargs)

    def wrap(self, f):
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

        def probed(x):
            levels = [str(i.key()) for i in retrieve_all_functorch_interpreters()]  # outermost first
            self.reverse_levels = max(self.reverse_levels, sum(level.endswith("Grad") for level in levels))
            grads = [k for k, level in enumerate(levels) if level.endswith("Grad")]
            jvps = [k for k, level in enumerate(levels) if level.endswith("Jvp")]
            self.reverse_over_forward |= bool(grads and jvps and grads[0] < jvps[-1])
            return f(x)

        return probed


_FORWARD_HINT = ("H(x) v is the directional derivative of the gradient function along v, and forward mode "
                 "(torch.func.jvp) computes directional derivatives: apply it to the function that torch.func.grad "
                 "returns")


@exercise(
    "21.hvp",
    "return the Hessian-vector product H(x) v of a scalar function f at x along v (v has x's shape; return a tensor "
    "of x's shape), exactly and without building H, with torch.func transforms composed forward over reverse.",
    reference=_hvp,
    shortcuts=_HVP_SHORTCUTS,
    goal="the Hessian-vector product (forward over reverse)",
    hint="H(x) v is the derivative of the gradient function in the direction v; one torch.func transform gives "
         "a gradient function, and forward mode gives directional derivatives.",
)
def _test_hvp(candidate) -> None:
    from torch.autograd.functional import hessian

    probes = []
    for label, f, x, v, want in _hvp_cases():
        x_before, v_before = x.clone(), v.clone()
        H = None
        if want is None:
            H = hessian(f, x).reshape(x.numel(), x.numel())
            want = (H @ v.flatten()).reshape(x.shape)
        probe = _ModeProbe()
        probes.append(probe)
        with probe:
            got = candidate(probe.wrap(f), x, v)
        if not torch.equal(x, x_before) or not torch.equal(v, v_before):
            raise AssertionError("leave x and v unchanged")
        if isinstance(got, tuple):
            raise AssertionError(
                "jvp returns a pair (value, directional derivative); return only the second element, H(x) v"
            )
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"return a tensor, got {type(got).__name__}")
        got = got.detach()
        if got.numel() == 1 and x.numel() > 1:
            raise Hint(
                f"{label}: you returned one number; H(x) v is a vector with the shape of x {tuple(x.shape)}",
                "grad(f)(x) @ v is the directional derivative of f, a first derivative; H v is the directional "
                "derivative of the gradient function",
            )
        if got.shape != x.shape:
            raise AssertionError(f"{label}: H(x) v should have x's shape {tuple(x.shape)}, got {tuple(got.shape)}")
        if torch.allclose(got.double(), want, rtol=1e-8, atol=1e-10):
            continue
        gradient = torch.func.grad(f)(x)
        if torch.allclose(got.double(), gradient * v, rtol=1e-6, atol=1e-8):
            raise Hint(
                f"{label}: you returned grad(f)(x) * v, a first derivative times v",
                "H v is the derivative of the gradient function itself in the direction v; forward mode "
                "(torch.func.jvp) computes directional derivatives of any function, gradient functions included",
            )
        if H is not None and torch.allclose(got.double(), (H.diagonal() * v.flatten()).reshape(x.shape), rtol=1e-6, atol=1e-8):
            raise AssertionError(f"{label}: you used only the diagonal of the Hessian; H v needs the whole matrix")
        if torch.allclose(got.double(), want, rtol=1e-2, atol=1e-3):
            raise Hint(
                f"{label}: close, but not exact (largest difference {(got.double() - want).abs().max():.2e})",
                "finite differences of the gradient are approximate, and for this f (a large gradient, large "
                "higher derivatives) no step size is accurate; forward-mode AD gives the exact product",
            )
        raise AssertionError(
            f"{label}: H(x) v differs from the exact Hessian-vector product by up to "
            f"{(got.double() - want).abs().max():.3g}"
        )
    # Every product is exact; now how it was computed. The task asks for forward over reverse.
    if any(p.double_backward for p in probes):
        raise Hint(
            "your H(x) v is exact, but it comes from a double backward pass (backward with create_graph=True, "
            "then a second backward): that is reverse over reverse, and the task asks for forward over reverse",
            _FORWARD_HINT,
        )
    if any(p.reverse_levels >= 2 for p in probes):
        raise Hint(
            "your H(x) v is exact, but you differentiated the gradient with reverse mode again (grad of grad: "
            "reverse over reverse); the task asks for forward over reverse",
            _FORWARD_HINT,
        )
    if any(p.backward for p in probes):
        raise Hint(
            "your H(x) v is exact, but it comes from .backward() through the gradient: reverse mode applied "
            "to a reverse-mode result (reverse over reverse); the task asks for forward over reverse",
            _FORWARD_HINT,
        )
    if any(p.reverse_over_forward for p in probes):
        raise Hint(
            "your H(x) v is exact, but reverse mode was applied outside forward mode (grad of a jvp: reverse "
            "over forward); the task asks for forward over reverse",
            _FORWARD_HINT,
        )
    if not all(p.dual for p in probes):
        raise Hint(
            "your H(x) v is exact, but no forward-mode (jvp) computation ran; the task asks for forward over reverse",
            _FORWARD_HINT,
        )
