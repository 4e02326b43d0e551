"""Exercises of chapter 12: realistic wrong answers fail with a hint (the generic checks are in test_exercises.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from helpers.exercises import check
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 12.inverted_dropout
# --------------------------------------------------------------------------


def test_dropout_without_scaling_fails():
    assert_rejected("12.inverted_dropout", lambda x, keep, p: x * keep, "(1 - p)")


def test_dropout_scaled_by_one_over_p_fails():
    assert_rejected("12.inverted_dropout", lambda x, keep, p: x * keep / p if p > 0 else x * keep, "DROPPING")


def test_dropout_multiplied_by_keep_probability_fails():
    assert_rejected("12.inverted_dropout", lambda x, keep, p: x * keep * (1 - p), "non-inverted")


def test_dropout_with_inverted_mask_fails():
    assert_rejected("12.inverted_dropout", lambda x, keep, p: x * ~keep / (1 - p), "KEPT")


def test_dropout_in_place_fails():
    def in_place(x, keep, p):
        x[~keep] = 0
        return x.div_(1 - p)

    assert_rejected("12.inverted_dropout", in_place, "in place")


def test_dropout_ignoring_the_mask_fails():
    # Returning x (or x / (1 - p)) must fail: every case drops some elements, also the one with a small p.
    assert_rejected("12.inverted_dropout", lambda x, keep, p: x.clone(), "")
    assert_rejected("12.inverted_dropout", lambda x, keep, p: x / (1 - p), "")


def test_dropout_in_another_dtype_fails():
    assert_rejected("12.inverted_dropout", lambda x, keep, p: (x * keep / (1 - p)).float(), "dtype")


def test_dropout_fallback_hint_does_not_paste_the_solution():
    result = check("12.inverted_dropout", lambda x, keep, p: x * keep / (1 - p) + 0.1, show=False)
    assert not result.passed
    assert "keep / (1 - p)" not in str(result.message) and "expected value" in str(result.message)


def test_dropout_with_masked_fill_is_accepted():
    assert check("12.inverted_dropout", lambda x, keep, p: x.masked_fill(~keep, 0) / (1 - p), show=False).passed


# --------------------------------------------------------------------------
# 12.bn_running_stats
# --------------------------------------------------------------------------


def _running(batches, momentum, *, correction=1, flip=False, start=True, per_image_var=False, fixed=False):
    c = batches[0].shape[1]
    mean = torch.zeros(c, dtype=batches[0].dtype) if start else None
    var = torch.ones(c, dtype=batches[0].dtype) if start else None
    for k, x in enumerate(batches, start=1):
        w = (0.1 if fixed else 1 / k) if momentum is None else momentum
        w = 1 - w if flip else w
        bm = x.mean(dim=(0, 2, 3))
        bv = x.flatten(2).var(dim=2, correction=correction).mean(0) if per_image_var else x.var(dim=(0, 2, 3), correction=correction)
        mean = bm if mean is None else (1 - w) * mean + w * bm
        var = bv if var is None else (1 - w) * var + w * bv
    return mean, var


def test_running_var_biased_fails():
    assert_rejected("12.bn_running_stats", lambda b, m: _running(b, m, correction=0), "UNBIASED")


def test_running_stats_with_optimizer_style_momentum_fails():
    assert_rejected("12.bn_running_stats", lambda b, m: _running(b, m, flip=True), "weight of the NEW batch")


def test_running_stats_starting_from_first_batch_fails():
    assert_rejected("12.bn_running_stats", lambda b, m: _running(b, m, start=False), "running_var = 1")


def test_running_var_per_image_fails():
    assert_rejected("12.bn_running_stats", lambda b, m: _running(b, m, per_image_var=True), "N * H * W")


def test_running_stats_ignoring_momentum_none_fails():
    assert_rejected("12.bn_running_stats", lambda b, m: _running(b, m if m is not None else 0.1), "cumulative")


def test_running_stats_last_batch_only_fails():
    def last_only(batches, momentum):
        return batches[-1].mean(dim=(0, 2, 3)), batches[-1].var(dim=(0, 2, 3))

    assert_rejected("12.bn_running_stats", last_only, "differs from nn.BatchNorm2d")


def test_running_stats_with_batchnorm_itself_fails():
    def with_module(batches, momentum):
        bn = torch.nn.BatchNorm2d(batches[0].shape[1], momentum=momentum).double().train()
        for x in batches:
            bn(x)
        return bn.running_mean.detach(), bn.running_var.detach()

    assert_rejected("12.bn_running_stats", with_module, "tensor.var")


def test_running_stats_returning_one_tensor_fails():
    assert_rejected("12.bn_running_stats", lambda b, m: torch.zeros(3), "pair")


# --------------------------------------------------------------------------
# 12.group_norm
# --------------------------------------------------------------------------


def _shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def test_group_norm_unbiased_variance_fails():
    def unbiased(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        out = (flat - flat.mean(-1, keepdim=True)) / torch.sqrt(flat.var(-1, keepdim=True) + eps)
        return out.reshape(x.shape) * w.reshape(_shape(x)) + b.reshape(_shape(x))

    assert_rejected("12.group_norm", unbiased, "biased")


def test_group_norm_without_affine_fails():
    def no_affine(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        return ((flat - flat.mean(-1, keepdim=True)) / torch.sqrt(flat.var(-1, keepdim=True, correction=0) + eps)).reshape(x.shape)

    assert_rejected("12.group_norm", no_affine, "weight and bias")


def test_group_norm_interleaved_groups_fails():
    def interleaved(x, g, w, b, eps=1e-5):
        n, c = x.shape[:2]
        flat = x.reshape(n, c // g, g, -1).transpose(1, 2).reshape(n, g, -1)
        out = (flat - flat.mean(-1, keepdim=True)) / torch.sqrt(flat.var(-1, keepdim=True, correction=0) + eps)
        out = out.reshape(n, g, c // g, -1).transpose(1, 2).reshape(x.shape)
        return out * w.reshape(_shape(x)) + b.reshape(_shape(x))

    assert_rejected("12.group_norm", interleaved, "CONSECUTIVE")


def test_group_norm_per_channel_fails():
    def per_channel(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], x.shape[1], -1)
        out = (flat - flat.mean(-1, keepdim=True)) / torch.sqrt(flat.var(-1, keepdim=True, correction=0) + eps)
        return out.reshape(x.shape) * w.reshape(_shape(x)) + b.reshape(_shape(x))

    assert_rejected("12.group_norm", per_channel, "InstanceNorm")


def test_group_norm_pooling_the_batch_fails():
    def pooled(x, g, w, b, eps=1e-5):
        n = x.shape[0]
        flat = x.reshape(n, g, -1)
        mean = flat.mean(dim=(0, 2), keepdim=True)
        var = flat.var(dim=(0, 2), keepdim=True, correction=0)
        return ((flat - mean) / torch.sqrt(var + eps)).reshape(x.shape) * w.reshape(_shape(x)) + b.reshape(_shape(x))

    assert_rejected("12.group_norm", pooled, "per sample")


def test_group_norm_calling_the_library_fails():
    assert_rejected("12.group_norm", lambda x, g, w, b, eps=1e-5: F.group_norm(x, g, w, b, eps), "yourself")
    assert_rejected("12.group_norm", lambda x, g, w, b, eps=1e-5: torch.group_norm(x, g, w, b, eps), "yourself")


def test_library_functions_are_restored_after_checking():
    check("12.group_norm", lambda x, g, w, b, eps=1e-5: F.group_norm(x, g, w, b, eps), show=False)
    x = torch.randn(2, 4, 3)
    assert torch.allclose(F.group_norm(x, 2), torch.nn.GroupNorm(2, 4, affine=False)(x))


def _affine(out, x, w, b):
    return out.reshape(x.shape) * w.reshape(_shape(x)) + b.reshape(_shape(x))


def test_group_norm_calling_layer_norm_per_group_fails():
    def via_layer_norm(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        return _affine(F.layer_norm(flat, flat.shape[-1:], eps=eps), x, w, b)

    def via_torch_layer_norm(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        return _affine(torch.layer_norm(flat, flat.shape[-1:], None, None, eps), x, w, b)

    assert_rejected("12.group_norm", via_layer_norm, "yourself")
    assert_rejected("12.group_norm", via_torch_layer_norm, "yourself")


def test_group_norm_via_batch_or_instance_norm_on_a_reshape_fails():
    def via_batch_norm(x, g, w, b, eps=1e-5):
        n = x.shape[0]
        flat = x.reshape(1, n * g, -1)  # each (sample, group) becomes a channel of one "batch"
        return _affine(F.batch_norm(flat, None, None, training=True, eps=eps), x, w, b)

    def via_instance_norm(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        return _affine(F.instance_norm(flat, eps=eps), x, w, b)

    def via_native_group_norm(x, g, w, b, eps=1e-5):
        n, c = x.shape[:2]
        return torch.native_group_norm(x, w, b, n, c, x[0, 0].numel(), g, eps)[0]

    for candidate in (via_batch_norm, via_instance_norm, via_native_group_norm):
        assert_rejected("12.group_norm", candidate, "yourself")


def _group_norm_by_hand(x, g, w, b, eps=1e-5):
    flat = x.reshape(x.shape[0], g, -1)
    mean = flat.mean(-1, keepdim=True)
    var = ((flat - mean) ** 2).mean(-1, keepdim=True)
    return _affine((flat - mean) / torch.sqrt(var + eps), x, w, b)


def test_group_norm_with_the_formula_written_out_is_accepted():
    assert check("12.group_norm", _group_norm_by_hand, show=False).passed


def test_group_norm_without_eps_fails():
    def no_eps(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        return _affine((flat - flat.mean(-1, keepdim=True)) / flat.std(-1, keepdim=True, correction=0), x, w, b)

    assert_rejected("12.group_norm", no_eps, "eps is missing")


def test_group_norm_with_eps_outside_the_sqrt_fails():
    def eps_outside(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        return _affine((flat - flat.mean(-1, keepdim=True)) / (flat.std(-1, keepdim=True, correction=0) + eps), x, w, b)

    assert_rejected("12.group_norm", eps_outside, "inside the square root")


def _running_buffers_updated_by(update):
    """An answer that lets a library op update fresh running buffers in place, batch by batch."""
    def answer(batches, momentum):
        c = batches[0].shape[1]
        mean, var = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
        for x in batches:
            update(x, mean, var, 0.1 if momentum is None else momentum)
        return mean, var

    return answer


def test_running_stats_via_native_batch_norm_fails():
    native = _running_buffers_updated_by(
        lambda x, mean, var, m: torch.native_batch_norm(x, None, None, mean, var, True, m, 1e-5))
    legit = _running_buffers_updated_by(
        lambda x, mean, var, m: torch._native_batch_norm_legit(x, None, None, mean, var, True, m, 1e-5))
    functional = _running_buffers_updated_by(
        lambda x, mean, var, m: F.batch_norm(x, mean, var, training=True, momentum=m))
    for candidate in (native, legit, functional):
        assert_rejected("12.bn_running_stats", candidate, "tensor.var")


def test_running_stats_in_another_dtype_fails():
    def as_float32(batches, momentum):
        mean, var = _running(batches, momentum)
        return mean.float(), var.float()

    assert_rejected("12.bn_running_stats", as_float32, "dtype")


def test_group_norm_in_another_dtype_fails():
    def as_float32(x, g, w, b, eps=1e-5):
        return _group_norm_by_hand(x, g, w, b, eps).float()

    assert_rejected("12.group_norm", as_float32, "dtype")


def test_running_stats_via_batch_norm_update_stats_fails():
    """BatchNorm's own statistics kernel, fed fresh buffers batch by batch: a shortcut."""
    update_stats = _running_buffers_updated_by(lambda x, mean, var, m: torch.batch_norm_update_stats(x, mean, var, m))
    assert_rejected("12.bn_running_stats", update_stats, "yourself", "torch.batch_norm_update_stats")


def test_running_stats_with_var_mean_is_accepted():
    def with_var_mean(batches, momentum):
        c = batches[0].shape[1]
        mean, var = torch.zeros(c, dtype=batches[0].dtype), torch.ones(c, dtype=batches[0].dtype)
        for i, x in enumerate(batches, 1):
            v, m = torch.var_mean(x, dim=(0, 2, 3), correction=1)
            f = 1 / i if momentum is None else momentum
            mean, var = torch.lerp(mean, m, f), torch.lerp(var, v, f)
        return mean, var

    assert check("12.bn_running_stats", with_var_mean, show=False).passed


def _centred_groups(x, g):
    flat = x.reshape(x.shape[0], g, -1)
    return flat - flat.mean(-1, keepdim=True)


def test_group_norm_via_rms_norm_of_the_centred_groups_fails():
    """RMS of the centred values is the biased standard deviation: F.rms_norm or nn.RMSNorm does the work."""
    def via_rms_norm(x, g, w, b, eps=1e-5):
        centred = _centred_groups(x, g)
        return _affine(F.rms_norm(centred, centred.shape[-1:], eps=eps), x, w, b)

    def via_rms_norm_layer(x, g, w, b, eps=1e-5):
        centred = _centred_groups(x, g)
        layer = torch.nn.RMSNorm(centred.shape[-1], eps=eps, elementwise_affine=False, dtype=x.dtype)
        return _affine(layer(centred), x, w, b)

    assert_rejected("12.group_norm", via_rms_norm, "yourself", "F.rms_norm")
    assert_rejected("12.group_norm", via_rms_norm_layer, "yourself", "nn.RMSNorm")


def test_group_norm_via_local_response_norm_fails():
    def via_lrn(x, g, w, b, eps=1e-5):
        return F.local_response_norm(x, 2)

    assert_rejected("12.group_norm", via_lrn, "yourself", "local_response_norm")


def test_dropout_task_states_the_range_of_p():
    from helpers.exercises import EXERCISES

    assert "0 <= p < 1" in EXERCISES["12.inverted_dropout"].task


# --------------------------------------------------------------------------
# Library kernels called through torch.ops.aten (issue 17): refused however reached
# --------------------------------------------------------------------------


def test_dropout_via_its_aten_kernels_fails():
    """native_dropout_backward(x, keep, 1 / (1 - p)) and _masked_scale compute the answer from the given mask."""
    def via_dropout_backward(x, keep, p):
        return torch.ops.aten.native_dropout_backward(x, keep, 1 / (1 - p))

    def via_an_alias(x, keep, p):
        kernel = torch.ops.aten.native_dropout_backward  # bound to a name first, then its overload called
        return kernel.default(x, keep, 1 / (1 - p))

    def via_masked_scale(x, keep, p):
        return torch._masked_scale(x, keep, 1 / (1 - p))

    assert_rejected("12.inverted_dropout", via_dropout_backward, "yourself", "native_dropout_backward")
    assert_rejected("12.inverted_dropout", via_an_alias, "yourself", "native_dropout_backward")
    assert_rejected("12.inverted_dropout", via_masked_scale, "yourself", "_masked_scale")


def test_dropout_task_says_the_dropout_kernels_are_refused():
    from helpers.exercises import EXERCISES

    assert "dropout kernels" in EXERCISES["12.inverted_dropout"].task


def test_dropout_with_torch_where_is_accepted():
    assert check("12.inverted_dropout", lambda x, keep, p: torch.where(keep, x / (1 - p), torch.zeros_like(x)),
                 show=False).passed


def test_running_stats_via_batch_norm_aten_kernels_fails():
    legit = _running_buffers_updated_by(
        lambda x, mean, var, m: torch.ops.aten._native_batch_norm_legit(x, None, None, mean, var, True, m, 1e-5))
    with_update = _running_buffers_updated_by(
        lambda x, mean, var, m: torch.ops.aten._batch_norm_with_update(x, None, None, mean, var, m, 1e-5))
    assert_rejected("12.bn_running_stats", legit, "yourself", "_native_batch_norm_legit")
    assert_rejected("12.bn_running_stats", with_update, "yourself", "_batch_norm_with_update")


def test_running_stats_with_var_mean_and_in_place_lerp_is_accepted():
    def in_place(batches, momentum):
        c = batches[0].shape[1]
        mean, var = torch.zeros(c, dtype=batches[0].dtype), torch.ones(c, dtype=batches[0].dtype)
        for i, x in enumerate(batches, 1):
            v, m = torch.var_mean(x, dim=(0, 2, 3))
            f = 1 / i if momentum is None else momentum
            mean.lerp_(m, f)
            var.lerp_(v, f)
        return mean, var

    assert check("12.bn_running_stats", in_place, show=False).passed


def test_group_norm_via_normalisation_aten_kernels_fails():
    def via_native_group_norm(x, g, w, b, eps=1e-5):
        n, c = x.shape[:2]
        return torch.ops.aten.native_group_norm(x, w, b, n, c, x[0, 0].numel(), g, eps)[0]

    def via_fused_rms_norm(x, g, w, b, eps=1e-5):
        centred = _centred_groups(x, g)
        return _affine(torch.ops.aten._fused_rms_norm(centred, [centred.shape[-1]], None, eps)[0], x, w, b)

    def via_batch_norm_kernel(x, g, w, b, eps=1e-5):
        flat = x.reshape(1, x.shape[0] * g, -1)  # each (sample, group) becomes a channel of one "batch"
        return _affine(torch.ops.aten._native_batch_norm_legit(flat, None, None, True, 0.0, eps)[0], x, w, b)

    def via_native_layer_norm(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        return _affine(torch.ops.aten.native_layer_norm(flat, flat.shape[-1:], None, None, eps)[0], x, w, b)

    for candidate, kernel in ((via_native_group_norm, "native_group_norm"), (via_fused_rms_norm, "_fused_rms_norm"),
                              (via_batch_norm_kernel, "_native_batch_norm_legit"),
                              (via_native_layer_norm, "native_layer_norm")):
        assert_rejected("12.group_norm", candidate, "yourself", kernel)


def test_group_norm_with_var_mean_and_rsqrt_is_accepted():
    def with_var_mean(x, g, w, b, eps=1e-5):
        flat = x.reshape(x.shape[0], g, -1)
        var, mean = torch.var_mean(flat, -1, correction=0, keepdim=True)
        return _affine((flat - mean) * torch.rsqrt(var + eps), x, w, b)

    assert check("12.group_norm", with_var_mean, show=False).passed
