"""Exercises of chapter 19: realistic wrong answers fail with a hint (the generic checks are in test_exercises.py)."""

from __future__ import annotations

import torch
from torch.autograd import Function

from helpers.exercises import check
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 19.logsumexp
# --------------------------------------------------------------------------


def _lse_class(forward, backward, save_output=True):
    """A current-style Function with the given forward(x) and backward(x, out, grad_out)."""

    class Candidate(Function):
        @staticmethod
        def forward(x):
            return forward(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0], output)

        @staticmethod
        def backward(ctx, grad_out):
            x, out = ctx.saved_tensors
            return backward(x, out, grad_out)

    return Candidate


def _stable_forward(x):
    m = x.amax(dim=-1, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)


def test_logsumexp_naive_forward_fails():
    cls = _lse_class(lambda x: torch.log(torch.exp(x).sum(-1)), lambda x, out, g: g.unsqueeze(-1) * torch.exp(x - out.unsqueeze(-1)))
    assert_rejected("19.logsumexp", cls, "overflows")


def test_logsumexp_naive_softmax_in_backward_fails():
    cls = _lse_class(_stable_forward, lambda x, out, g: g.unsqueeze(-1) * torch.exp(x) / torch.exp(x).sum(-1, keepdim=True))
    assert_rejected("19.logsumexp", cls, "NaN")


def test_logsumexp_forgetting_grad_out_fails():
    cls = _lse_class(_stable_forward, lambda x, out, g: torch.exp(x - out.unsqueeze(-1)))
    assert_rejected("19.logsumexp", cls, "gradcheck")


def test_logsumexp_without_unsqueeze_fails():
    cls = _lse_class(_stable_forward, lambda x, out, g: g * torch.exp(x - out.unsqueeze(-1)))
    result = check("19.logsumexp", cls, show=False)
    assert result.status == "failed"


def test_logsumexp_keepdim_output_fails():
    def forward(x):
        m = x.amax(dim=-1, keepdim=True)
        return m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))

    cls = _lse_class(forward, lambda x, out, g: g * torch.exp(x - out))
    assert_rejected("19.logsumexp", cls, "squeeze")


def test_logsumexp_builtin_is_not_a_custom_function():
    assert_rejected("19.logsumexp", lambda x: torch.logsumexp(x, dim=-1), "yourself", "torch.logsumexp")


def _correct_backward(x, out, g):
    return g.unsqueeze(-1) * torch.exp(x - out.unsqueeze(-1))


def test_logsumexp_function_wrapping_torch_logsumexp_is_a_shortcut():
    cls = _lse_class(lambda x: torch.logsumexp(x, dim=-1), _correct_backward)
    assert_rejected("19.logsumexp", cls, "yourself", "torch.logsumexp")


def test_logsumexp_function_wrapping_tensor_method_is_a_shortcut():
    cls = _lse_class(lambda x: x.logsumexp(-1), _correct_backward)
    assert_rejected("19.logsumexp", cls, "yourself", "logsumexp")


def test_logsumexp_function_wrapping_special_logsumexp_is_a_shortcut():
    cls = _lse_class(lambda x: torch.special.logsumexp(x, dim=-1), _correct_backward)
    assert_rejected("19.logsumexp", cls, "yourself", "logsumexp")


def test_logsumexp_function_wrapping_aten_logsumexp_is_a_shortcut():
    cls = _lse_class(lambda x: torch.ops.aten.logsumexp(x, [-1]), _correct_backward)
    assert_rejected("19.logsumexp", cls, "yourself", "logsumexp")


def test_logsumexp_function_wrapping_logcumsumexp_is_a_shortcut():
    cls = _lse_class(lambda x: torch.logcumsumexp(x, -1)[..., -1], _correct_backward)
    assert_rejected("19.logsumexp", cls, "yourself", "logcumsumexp")


def test_logsumexp_fixed_dim_1_fails():
    def forward(x):
        m = x.amax(dim=1, keepdim=True)
        return (m + torch.log(torch.exp(x - m).sum(dim=1, keepdim=True))).squeeze(1)

    assert_rejected("19.logsumexp", _lse_class(forward, _correct_backward), "shape", "last dimension")


def test_logsumexp_masked_row_nan_forward_fails():
    def forward(x):  # stable, but no care for a row whose maximum is -inf
        m = x.amax(dim=-1, keepdim=True)
        return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)

    assert_rejected("19.logsumexp", _lse_class(forward, _correct_backward), "fully masked", "-inf")


def test_logsumexp_masked_row_nan_gradient_fails():
    from helpers.exercises.ch19 import _LogSumExp

    cls = _lse_class(_LogSumExp.forward, _correct_backward)  # exp(-inf - (-inf)) = NaN on the masked row
    assert_rejected("19.logsumexp", cls, "fully masked", "gradient")


def test_logsumexp_fuller_hint_names_the_shift():
    from helpers.exercises import hint

    cls = _lse_class(lambda x: torch.log(torch.exp(x).sum(-1)), _correct_backward)
    assert check("19.logsumexp", cls, show=False).status == "failed"
    assert "maximum" in hint("19.logsumexp", show=False)


def test_logsumexp_old_style_fails():
    class OldStyle(Function):
        @staticmethod
        def forward(ctx, x):
            out = _stable_forward(x)
            ctx.save_for_backward(x, out)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            x, out = ctx.saved_tensors
            return grad_out.unsqueeze(-1) * torch.exp(x - out.unsqueeze(-1))

    assert_rejected("19.logsumexp", OldStyle, "setup_context")


def _masked_safe_backward(x, out, g):
    p = torch.exp(x - out.unsqueeze(-1))
    return g.unsqueeze(-1) * torch.where(torch.isneginf(out).unsqueeze(-1), torch.zeros_like(p), p)


def _masked_safe_forward(x):
    from helpers.exercises.ch19 import _LogSumExp

    return _LogSumExp.forward(x)


def test_logsumexp_tensors_as_ctx_attributes_fail():
    class CtxAttributes(Function):  # the chapter's pitfall: ctx.out = output makes a reference cycle
        @staticmethod
        def forward(x):
            return _masked_safe_forward(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.x = inputs[0]
            ctx.out = output

        @staticmethod
        def backward(ctx, g):
            return _masked_safe_backward(ctx.x, ctx.out, g)

    result = assert_rejected("19.logsumexp", CtxAttributes, "ctx.x, ctx.out", "version check", "cycle")
    assert "save_for_backward" not in result.message.split(" Hint: ")[0]  # the fix is the fuller hint's


def test_logsumexp_forward_via_log_softmax_is_a_shortcut():
    def forward(x):  # lse(x) = x_0 - log_softmax(x)_0
        r = (x - torch.log_softmax(x, -1))[..., 0]
        return torch.where(torch.isneginf(x).all(-1), torch.full_like(r, float("-inf")), r)

    assert_rejected("19.logsumexp", _lse_class(forward, _masked_safe_backward), "yourself", "log_softmax")


def test_logsumexp_forward_via_functional_log_softmax_is_a_shortcut():
    import torch.nn.functional as F

    def forward(x):
        r = (x - F.log_softmax(x, dim=-1))[..., :1].squeeze(-1)
        return torch.where(torch.isneginf(x).all(-1), torch.full_like(r, float("-inf")), r)

    assert_rejected("19.logsumexp", _lse_class(forward, _masked_safe_backward), "yourself", "log_softmax")


def test_logsumexp_forward_via_softmax_is_a_shortcut():
    def forward(x):
        r = x[..., 0] - torch.log(x.softmax(-1)[..., 0])
        return torch.where(torch.isneginf(x).all(-1), torch.full_like(r, float("-inf")), r)

    assert_rejected("19.logsumexp", _lse_class(forward, _masked_safe_backward), "yourself", "softmax")


def test_logsumexp_softmax_in_the_backward_is_accepted():
    def backward(x, out, g):  # the derivative is the softmax: computing it with torch.softmax is fine
        return g.unsqueeze(-1) * torch.softmax(x, -1).nan_to_num(0.0)

    assert check("19.logsumexp", _lse_class(_masked_safe_forward, backward), show=False).passed


def test_logsumexp_backward_by_autograd_is_a_shortcut():
    def backward(x, out, g):  # re-runs the forward under autograd instead of writing the derivative
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            m = xx.amax(-1, keepdim=True).detach().nan_to_num(neginf=0.0)
            y = (m + torch.log(torch.exp(xx - m).sum(-1, keepdim=True))).squeeze(-1)
            (gx,) = torch.autograd.grad(y, xx, g)
        return gx.nan_to_num(0.0)

    assert_rejected("19.logsumexp", _lse_class(_masked_safe_forward, backward), "yourself", "autograd")


def test_logsumexp_backward_calling_autograd_grad_is_a_shortcut():
    def backward(x, out, g):
        with torch.set_grad_enabled(True):
            xx = x.detach().requires_grad_()
            (gx,) = torch.autograd.grad(_masked_safe_forward(xx), xx, g)
        return gx.nan_to_num(0.0)

    assert_rejected("19.logsumexp", _lse_class(_masked_safe_forward, backward), "yourself", "set_grad_enabled")


def test_logsumexp_backward_by_torch_func_vjp_is_a_shortcut():
    def backward(x, out, g):
        _, vjp = torch.func.vjp(_masked_safe_forward, x)
        return vjp(g)[0].nan_to_num(0.0)

    assert_rejected("19.logsumexp", _lse_class(_masked_safe_forward, backward), "yourself", "torch.func.vjp")


def test_logsumexp_wrapper_function_is_accepted():
    from helpers.exercises import solution

    cls = solution("19.logsumexp")
    assert check("19.logsumexp", lambda x: cls.apply(x), show=False).passed


# --------------------------------------------------------------------------
# 19.fake_kernel
# --------------------------------------------------------------------------


def test_fake_kernel_calling_numpy_fails():
    from helpers.exercises.ch19 import _numpy_pairwise_sqdist

    assert_rejected("19.fake_kernel", _numpy_pairwise_sqdist, "without data")


def test_fake_kernel_torch_empty_float32_fails():
    def fake(x, y):
        return torch.empty(x.shape[0], y.shape[0])

    assert_rejected("19.fake_kernel", fake, "float32")


def test_fake_kernel_torch_empty_without_device_fails():
    def fake(x, y):
        return torch.empty(x.shape[0], y.shape[0], dtype=x.dtype)  # right dtype, but always on the CPU

    assert_rejected("19.fake_kernel", fake, "meta", "cpu")


def test_fake_kernel_square_shape_fails():
    def fake(x, y):
        return x.new_empty(x.shape[0], x.shape[0])

    assert_rejected("19.fake_kernel", fake, "shape")


def test_fake_kernel_input_shape_fails():
    def fake(x, y):
        return torch.empty_like(x)

    assert_rejected("19.fake_kernel", fake, "shape")


def test_fake_kernel_returning_an_input_fails():
    def fake(x, y):
        return x

    assert_rejected("19.fake_kernel", fake, "new tensor")


def test_fake_kernel_computing_with_torch_is_accepted():
    def fake(x, y):
        return torch.cdist(x, y) ** 2  # real torch ops also run on fake tensors

    assert check("19.fake_kernel", fake, show=False).passed
