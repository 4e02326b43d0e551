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
