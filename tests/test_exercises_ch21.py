"""Exercises of chapter 21: realistic wrong answers fail with a hint, right variants pass."""

from __future__ import annotations

import torch

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 21.clip_per_sample
# --------------------------------------------------------------------------


def _norms(grads):
    return torch.stack([g.flatten(start_dim=1).norm(dim=1) for g in grads.values()], dim=1).norm(dim=1)


def test_clip_per_sample_per_tensor_fails():
    def per_tensor(grads, max_norm):
        out = {}
        for name, g in grads.items():
            n = g.flatten(start_dim=1).norm(dim=1)
            factor = (max_norm / (n + 1e-6)).clamp(max=1.0)
            out[name] = (g * factor.view(-1, *([1] * (g.dim() - 1)))).mean(0)
        return out

    assert_rejected("21.clip_per_sample", per_tensor, "each parameter tensor")


def test_clip_per_sample_clipping_the_mean_fails():
    def clip_mean(grads, max_norm):
        mean = {k: g.mean(0) for k, g in grads.items()}
        total = torch.sqrt(sum(m.pow(2).sum() for m in mean.values()))
        return {k: m * min(1.0, max_norm / (total.item() + 1e-6)) for k, m in mean.items()}

    assert_rejected("21.clip_per_sample", clip_mean, "batch-mean")


def test_clip_per_sample_scaling_up_fails():
    def always_scale(grads, max_norm):
        factor = max_norm / (_norms(grads) + 1e-6)
        return {k: torch.einsum("b,b...->...", factor, g) / len(factor) for k, g in grads.items()}

    assert_rejected("21.clip_per_sample", always_scale, "min(1, max_norm / norm)")


def test_clip_per_sample_sum_fails():
    def summed(grads, max_norm):
        factor = (max_norm / (_norms(grads) + 1e-6)).clamp(max=1.0)
        return {k: torch.einsum("b,b...->...", factor, g) for k, g in grads.items()}

    assert_rejected("21.clip_per_sample", summed, "average")


def test_clip_per_sample_not_averaged_fails():
    def per_example(grads, max_norm):
        factor = (max_norm / (_norms(grads) + 1e-6)).clamp(max=1.0)
        return {k: g * factor.view(-1, *([1] * (g.dim() - 1))) for k, g in grads.items()}

    assert_rejected("21.clip_per_sample", per_example, "batch dimension")


def test_clip_per_sample_zero_gradient_nan_fails():
    def no_eps(grads, max_norm):
        norms = _norms(grads)
        factor = torch.clamp(norms, max=max_norm) / norms  # 0 / 0 for an all-zero gradient
        return {k: torch.einsum("b,b...->...", factor, g) / len(factor) for k, g in grads.items()}

    assert_rejected("21.clip_per_sample", no_eps, "NaN")


def test_clip_per_sample_in_place_fails():
    def in_place(grads, max_norm):
        factor = (max_norm / (_norms(grads) + 1e-6)).clamp(max=1.0)
        for g in grads.values():
            g.mul_(factor.view(-1, *([1] * (g.dim() - 1))))
        return {k: g.mean(0) for k, g in grads.items()}

    assert_rejected("21.clip_per_sample", in_place, "unchanged")


def test_clip_per_sample_loop_with_clamp_min_is_accepted():
    def loop(grads, max_norm):
        names = list(grads)
        B = grads[names[0]].shape[0]
        total = {k: torch.zeros_like(grads[k][0]) for k in names}
        for i in range(B):
            norm = torch.sqrt(sum(grads[k][i].pow(2).sum() for k in names))
            scale = min(1.0, max_norm / max(norm.item(), 1e-12))
            for k in names:
                total[k] += grads[k][i] * scale
        return {k: v / B for k, v in total.items()}

    assert check("21.clip_per_sample", loop, show=False).passed


def test_clip_per_sample_loop_of_clip_grad_norm_is_a_shortcut():
    def library_loop(grads, max_norm):
        names = list(grads)
        B = grads[names[0]].shape[0]
        holders = [torch.nn.Parameter(torch.zeros_like(grads[k][0])) for k in names]
        total = {k: torch.zeros_like(grads[k][0]) for k in names}
        for i in range(B):
            for p, k in zip(holders, names):
                p.grad = grads[k][i].clone()
            torch.nn.utils.clip_grad_norm_(holders, max_norm)  # the library clips each example
            for p, k in zip(holders, names):
                total[k] += p.grad
        return {k: v / B for k, v in total.items()}

    assert_rejected("21.clip_per_sample", library_loop, "yourself", "clip_grad_norm_")


def test_clip_per_sample_get_total_norm_is_a_shortcut():
    def library_norms(grads, max_norm):
        names = list(grads)
        B = grads[names[0]].shape[0]
        norms = torch.stack([torch.nn.utils.get_total_norm([grads[k][i] for k in names]) for i in range(B)])
        factor = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        return {k: torch.einsum("b,b...->...", factor, g) / B for k, g in grads.items()}

    assert_rejected("21.clip_per_sample", library_norms, "yourself", "get_total_norm")


# --------------------------------------------------------------------------
# 21.hvp
# --------------------------------------------------------------------------


def test_hvp_gradient_times_v_fails():
    def grad_times_v(f, x, v):
        return torch.func.grad(f)(x) * v

    assert_rejected("21.hvp", grad_times_v, "grad(f)(x) * v")


def test_hvp_directional_derivative_fails():
    def directional(f, x, v):
        return (torch.func.grad(f)(x) * v).sum()

    assert_rejected("21.hvp", directional, "one number")


def test_hvp_returning_the_jvp_pair_fails():
    def pair(f, x, v):
        return torch.func.jvp(torch.func.grad(f), (x,), (v,))

    assert_rejected("21.hvp", pair, "second element")


def test_hvp_finite_differences_fails():
    def finite(f, x, v, eps=1e-3):
        g = torch.func.grad(f)
        return (g(x + eps * v) - g(x)) / eps

    assert_rejected("21.hvp", finite, "close, but not exact")


def test_hvp_central_finite_differences_with_small_step_fails():
    def central(f, x, v, eps=1e-6):
        g = torch.func.grad(f)
        return (g(x + eps * v) - g(x - eps * v)) / (2 * eps)

    assert_rejected("21.hvp", central, "close, but not exact")


def test_hvp_diagonal_only_fails():
    def diagonal(f, x, v):
        H = torch.autograd.functional.hessian(f, x).reshape(x.numel(), x.numel())
        return (H.diagonal() * v.flatten()).reshape(x.shape)

    assert_rejected("21.hvp", diagonal, "yourself", "torch.autograd.functional.hessian")


def test_hvp_full_hessian_is_a_shortcut():
    def full(f, x, v):
        H = torch.func.hessian(f)(x).reshape(x.numel(), x.numel())
        return (H @ v.flatten()).reshape(x.shape)

    assert_rejected("21.hvp", full, "yourself", "torch.func.hessian")


def test_hvp_jacfwd_of_grad_is_a_shortcut():
    def jacobian_of_grad(f, x, v):
        H = torch.func.jacfwd(torch.func.grad(f))(x).reshape(x.numel(), x.numel())
        return (H @ v.flatten()).reshape(x.shape)

    assert_rejected("21.hvp", jacobian_of_grad, "yourself", "torch.func.jacfwd")


def test_hvp_jacrev_of_grad_is_a_shortcut():
    def jacobian_of_grad(f, x, v):
        H = torch.func.jacrev(torch.func.grad(f))(x).reshape(x.numel(), x.numel())
        return (H @ v.flatten()).reshape(x.shape)

    assert_rejected("21.hvp", jacobian_of_grad, "yourself", "torch.func.jacrev")


def test_hvp_autograd_functional_hvp_is_a_shortcut():
    def library(f, x, v):
        return torch.autograd.functional.hvp(f, x, v)[1]

    assert_rejected("21.hvp", library, "yourself", "torch.autograd.functional.hvp")


def test_hvp_reverse_over_reverse_with_vjp_is_a_shortcut():
    def reverse_over_reverse(f, x, v):
        _, pullback = torch.func.vjp(torch.func.grad(f), x)
        return pullback(v)[0]

    assert_rejected("21.hvp", reverse_over_reverse, "yourself", "torch.func.vjp")


def test_hvp_double_backward_is_a_shortcut():
    def double_backward(f, x, v):
        x = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(f(x), x, create_graph=True)
        return torch.autograd.grad(g, x, grad_outputs=v)[0]

    assert_rejected("21.hvp", double_backward, "yourself", "torch.autograd.grad")


def test_hvp_reverse_over_reverse_with_grad_of_grad_fails():
    def grad_of_grad(f, x, v):
        return torch.func.grad(lambda t: (torch.func.grad(f)(t) * v).sum())(x)

    assert_rejected("21.hvp", grad_of_grad, "reverse over reverse", "forward over reverse")


def test_hvp_double_backward_with_create_graph_fails():
    def double_backward(f, x, v):
        x = x.detach().requires_grad_()
        f(x).backward(create_graph=True)
        first = x.grad
        x.grad = None
        (first * v).sum().backward()
        return x.grad

    assert_rejected("21.hvp", double_backward, "double backward", "forward over reverse")


def test_hvp_backward_through_func_grad_fails():
    def backward_through_grad(f, x, v):  # torch.func.grad inside ordinary autograd: reverse over reverse again
        x = x.detach().requires_grad_()
        (torch.func.grad(f)(x) * v).sum().backward()
        return x.grad

    assert_rejected("21.hvp", backward_through_grad, ".backward() through the gradient", "forward over reverse")


def test_hvp_a_throwaway_jvp_beside_reverse_over_reverse_fails():
    def throwaway_jvp(f, x, v):
        torch.func.jvp(torch.sin, (x,), (v,))  # forward mode, but not of the gradient
        x = x.detach().requires_grad_()
        (torch.func.grad(f)(x) * v).sum().backward()
        return x.grad

    assert_rejected("21.hvp", throwaway_jvp, ".backward() through the gradient", "forward over reverse")


def test_hvp_reverse_over_forward_fails_even_with_a_throwaway_jvp():
    def reverse_over_forward(f, x, v):  # grad of a jvp: exact (H is symmetric), but the other order
        return torch.func.grad(lambda t: torch.func.jvp(f, (t,), (v,))[1])(x)

    def with_throwaway(f, x, v):
        torch.func.jvp(torch.sin, (x,), (v,))
        return reverse_over_forward(f, x, v)

    for answer in (reverse_over_forward, with_throwaway):
        assert_rejected("21.hvp", answer, "reverse over forward", "forward over reverse")


def test_hvp_a_throwaway_jvp_alone_does_not_make_forward_mode():
    def throwaway_then_grad_of_grad(f, x, v):
        torch.func.jvp(torch.sin, (x,), (v,))
        return torch.func.grad(lambda t: (torch.func.grad(f)(t) * v).sum())(x)

    assert_rejected("21.hvp", throwaway_then_grad_of_grad, "reverse over reverse")


def test_hvp_forward_mode_variants_are_accepted():
    import torch.autograd.forward_ad as fwAD

    def linearized(f, x, v):
        return torch.func.linearize(torch.func.grad(f), x)[1](v)

    def dual_numbers(f, x, v):
        with fwAD.dual_level():
            return fwAD.unpack_dual(torch.func.grad(f)(fwAD.make_dual(x, v))).tangent

    assert check("21.hvp", linearized, show=False).passed
    assert check("21.hvp", dual_numbers, show=False).passed


def test_hvp_reference_is_accepted():
    assert check("21.hvp", solution("21.hvp"), show=False).passed


def test_clip_per_sample_broadcast_only_for_2d_and_3d_fails():
    # a factor broadcast by hand for [B, n] and [B, a, b] gradients breaks on conv weights ([B, out, in, kh, kw])
    def two_or_three_dims(per_sample_grads, max_norm):
        sq = sum(g.pow(2).sum(dim=tuple(range(1, g.dim()))) for g in per_sample_grads.values())
        factor = (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)
        return {k: (g * factor[:, None, None]).mean(0) if g.dim() == 3 else (g * factor[:, None]).mean(0)
                for k, g in per_sample_grads.items()}

    assert_rejected("21.clip_per_sample", two_or_three_dims, "RuntimeError")
