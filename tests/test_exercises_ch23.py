"""Exercises of chapter 23: realistic wrong answers fail with a hint (the generic
checks, reference passes and stub not attempted, are in tests/test_exercises.py)."""

from __future__ import annotations

import torch

from helpers.exercises import _get, check
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 23.quantize_asymmetric
# --------------------------------------------------------------------------


def _signed(bits):
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def test_quantize_asymmetric_without_zero_in_range_fails():
    def no_zero(x, bits):
        qmin, qmax = _signed(bits)
        lo, hi = x.min().item(), x.max().item()
        scale = (hi - lo) / (qmax - qmin)
        zp = int(qmin - round(lo / scale))
        return torch.clamp(torch.round(x / scale) + zp, qmin, qmax).int(), scale, zp

    assert_rejected("23.quantize_asymmetric", no_zero, "include 0")


def _right_q(x, bits):
    qmin, qmax = _signed(bits)
    lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
    scale = (hi - lo) / (qmax - qmin)
    zp = int(qmin - round(lo / scale))
    return torch.clamp(torch.round(x / scale) + zp, qmin, qmax), scale, zp


def test_quantize_asymmetric_int8_storage_wraps_at_16_bits():
    def int8(x, bits):  # right up to 8 bits; at 16 bits the integers wrap around
        q, scale, zp = _right_q(x, bits)
        return q.to(torch.int8), scale, zp

    result = assert_rejected("23.quantize_asymmetric", int8, "16 bits", "int8", "[-128, 127]", "wrapped around")
    assert "int16" not in result.message.split(" Hint: ")[0]  # the dtype to pick is the fuller hint's


def test_quantize_asymmetric_int16_and_float64_answers_are_accepted():
    def int16(x, bits):
        q, scale, zp = _right_q(x, bits)
        return q.to(torch.int16), scale, zp

    def float64(x, bits):  # divides in float64: at 16 bits a few values round the other way at a .5 tie
        qmin, qmax = _signed(bits)
        lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
        scale = (hi - lo) / (qmax - qmin)
        zp = int(qmin - round(lo / scale))
        return torch.clamp(torch.round(x.double() / scale) + zp, qmin, qmax).to(torch.int64), scale, zp

    assert check("23.quantize_asymmetric", int16, show=False).passed
    assert check("23.quantize_asymmetric", float64, show=False).passed


def test_quantize_asymmetric_dividing_by_two_to_the_bits_fails():
    def levels(x, bits):
        qmin, qmax = _signed(bits)
        lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
        scale = (hi - lo) / 2**bits
        zp = int(qmin - round(lo / scale))
        return torch.clamp(torch.round(x / scale) + zp, qmin, qmax).int(), scale, zp

    assert_rejected("23.quantize_asymmetric", levels, "steps")


def test_quantize_asymmetric_unrounded_zero_point_fails():
    def float_zp(x, bits):
        qmin, qmax = _signed(bits)
        lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
        scale = (hi - lo) / (qmax - qmin)
        zp = qmin - lo / scale
        return torch.clamp(torch.round(x / scale + zp), qmin, qmax).int(), scale, zp

    assert_rejected("23.quantize_asymmetric", float_zp, "integer")


def test_quantize_asymmetric_unsigned_range_fails():
    def unsigned(x, bits):
        qmin, qmax = 0, 2**bits - 1
        lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
        scale = (hi - lo) / (qmax - qmin)
        zp = int(qmin - round(lo / scale))
        return torch.clamp(torch.round(x / scale) + zp, qmin, qmax).int(), scale, zp

    assert_rejected("23.quantize_asymmetric", unsigned, "signed")


def test_quantize_asymmetric_zero_point_sign_flipped_fails():
    def flipped(x, bits):
        qmin, qmax = _signed(bits)
        lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
        scale = (hi - lo) / (qmax - qmin)
        zp = int(qmin + round(lo / scale))
        return torch.clamp(torch.round(x / scale) + zp, qmin, qmax).int(), scale, zp

    assert_rejected("23.quantize_asymmetric", flipped, "wrong way round")


def test_quantize_asymmetric_without_rounding_q_fails():
    def truncated(x, bits):
        qmin, qmax = _signed(bits)
        lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
        scale = (hi - lo) / (qmax - qmin)
        zp = int(qmin - round(lo / scale))
        return torch.clamp((x / scale).int() + zp, qmin, qmax), scale, zp  # .int() truncates towards 0

    assert_rejected("23.quantize_asymmetric", truncated, "differ")


def test_quantize_asymmetric_with_tensor_scale_is_accepted():
    def tensors(x, bits):
        qmin, qmax = _signed(bits)
        lo, hi = torch.clamp(x.min(), max=0.0), torch.clamp(x.max(), min=0.0)
        scale = (hi - lo) / (qmax - qmin)
        zp = torch.clamp(qmin - torch.round(lo / scale), qmin, qmax)
        q = torch.clamp(torch.round(x / scale) + zp, qmin, qmax).to(torch.int32)
        return q, scale.item(), int(zp.item())  # tensors inside; the stated Python types out

    assert check("23.quantize_asymmetric", tensors, show=False).passed


def _right(x, bits):
    qmin, qmax = _signed(bits)
    lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
    scale = (hi - lo) / (qmax - qmin)
    zp = int(qmin - round(lo / scale))
    return torch.clamp(torch.round(x / scale) + zp, qmin, qmax).to(torch.int32), scale, zp


def test_quantize_asymmetric_with_float_q_fails():
    def float_q(x, bits):
        q, scale, zp = _right(x, bits)
        return q.float(), scale, zp

    assert_rejected("23.quantize_asymmetric", float_q, "integer tensor", "float32")


def test_quantize_asymmetric_with_tensor_scale_and_zero_point_fails():
    def tensor_params(x, bits):
        q, scale, zp = _right(x, bits)
        return q, torch.tensor(scale), torch.tensor(zp)

    assert_rejected("23.quantize_asymmetric", tensor_params, "scale should be a Python float, got Tensor")

    def tensor_zp(x, bits):
        q, scale, zp = _right(x, bits)
        return q, scale, torch.tensor(zp)

    assert_rejected("23.quantize_asymmetric", tensor_zp, "zero_point should be a Python int, got Tensor")


def test_quantize_asymmetric_with_min_max_observer_is_refused():
    def observer(x, bits):
        from torch.ao.quantization.observer import MinMaxObserver

        qmin, qmax = _signed(bits)
        ob = MinMaxObserver(dtype=torch.qint8, quant_min=qmin, quant_max=qmax)
        ob(x)
        s, z = ob.calculate_qparams()
        return torch.clamp(torch.round(x / s) + z, qmin, qmax).to(torch.int32), float(s), int(z)

    assert_rejected("23.quantize_asymmetric", observer, "yourself", "MinMaxObserver")


def test_quantize_asymmetric_with_fake_quantize_is_refused():
    def fake(x, bits):
        qmin, qmax = _signed(bits)
        _, scale, zp = _right(x, bits)
        q = torch.fake_quantize_per_tensor_affine(x, scale, zp, qmin, qmax) / scale + zp
        return q.round().to(torch.int32), scale, zp

    assert_rejected("23.quantize_asymmetric", fake, "yourself", "fake_quantize_per_tensor_affine")

    def quantize(x, bits):
        _, scale, zp = _right(x, bits)
        return torch.quantize_per_tensor(x, scale, zp, torch.qint8).int_repr().to(torch.int32), scale, zp

    assert_rejected("23.quantize_asymmetric", quantize, "yourself", "quantize_per_tensor")


# --------------------------------------------------------------------------
# 23.per_channel_scales
# --------------------------------------------------------------------------


def test_per_channel_scales_per_tensor_fails():
    def per_tensor(w, bits):
        qmin, qmax = _signed(bits)
        return w.abs().max() / ((qmax - qmin) / 2)

    assert_rejected("23.per_channel_scales", per_tensor, "per output channel")


def test_per_channel_scales_over_input_channels_fails():
    def per_input(w, bits):
        qmin, qmax = _signed(bits)
        return w.abs().amax(dim=0) / ((qmax - qmin) / 2)

    assert_rejected("23.per_channel_scales", per_input, "input")


def test_per_channel_scales_dividing_by_qmax_fails():
    def by_qmax(w, bits):
        _, qmax = _signed(bits)
        return w.abs().flatten(1).amax(dim=1) / qmax

    assert_rejected("23.per_channel_scales", by_qmax, "(qmax - qmin) / 2")


def test_per_channel_scales_without_abs_fails():
    def no_abs(w, bits):
        qmin, qmax = _signed(bits)
        return w.flatten(1).amax(dim=1) / ((qmax - qmin) / 2)

    assert_rejected("23.per_channel_scales", no_abs, "absolute")


def test_per_channel_scales_only_last_dim_fails_for_conv():
    def last_dim(w, bits):
        qmin, qmax = _signed(bits)
        return w.abs().amax(dim=-1) / ((qmax - qmin) / 2)

    result = assert_rejected("23.per_channel_scales", last_dim, "except 0")
    assert "flatten(1).amax" not in result.message, f"the hint should not paste the solution: {result.message}"


# --------------------------------------------------------------------------
# torchao's primitives: shortcuts for both exercises
# --------------------------------------------------------------------------


def test_quantize_asymmetric_with_torchao_primitives_is_refused():
    from torchao.quantization import MappingType
    from torchao.quantization.quant_primitives import choose_qparams_affine, quantize_affine

    def with_torchao(x, bits):
        qmin, qmax = _signed(bits)
        scale, zp = choose_qparams_affine(x, MappingType.ASYMMETRIC, x.shape, torch.int32, quant_min=qmin, quant_max=qmax)
        q = quantize_affine(x, x.shape, scale, zp, torch.int32, quant_min=qmin, quant_max=qmax)
        return q, scale.item(), int(zp.item())

    _get("23.quantize_asymmetric").test(with_torchao)  # without the guard: a correct answer
    assert_rejected("23.quantize_asymmetric", with_torchao, "yourself", "choose_qparams_affine")


def test_per_channel_scales_with_torchao_is_refused():
    from torchao.quantization import MappingType
    from torchao.quantization.quant_primitives import choose_qparams_affine

    def with_torchao(w, bits):
        qmin, qmax = _signed(bits)
        scale, _ = choose_qparams_affine(w, MappingType.SYMMETRIC, (1, *w.shape[1:]), torch.int8,
                                         quant_min=qmin, quant_max=qmax)
        return scale

    _get("23.per_channel_scales").test(with_torchao)  # without the guard: a correct answer
    assert_rejected("23.per_channel_scales", with_torchao, "yourself", "choose_qparams_affine")


def test_per_channel_scales_with_per_channel_observer_is_refused():
    def observer(w, bits):
        from torch.ao.quantization.observer import PerChannelMinMaxObserver

        qmin, qmax = _signed(bits)
        ob = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                      quant_min=qmin, quant_max=qmax)
        ob(w)
        return ob.calculate_qparams()[0]

    assert_rejected("23.per_channel_scales", observer, "yourself", "PerChannelMinMaxObserver")
