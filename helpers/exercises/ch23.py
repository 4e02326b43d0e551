"""Exercises of chapter 23 (quantisation): checkers and reference solutions.

The checkers use plain torch, not torchao, so that importing them is quick;
the chapter itself shows that the same formulas match torchao's primitives
(``torchao.quantization.quant_primitives.choose_qparams_affine`` and
``quantize_affine``).
"""

from __future__ import annotations

import torch

from . import Hint, Shortcut, exercise, expect_type

#: torchao's primitives compute these quantisation parameters (and the integers) for the learner. Lazy:
#: importing torchao takes seconds, and a learner who never imported it cannot be calling it.
_TORCHAO_QPARAMS = tuple(
    Shortcut(f"torchao.quantization.quant_primitives.{name}", lazy=True)
    for name in ("choose_qparams_affine", "choose_qparams_affine_with_min_max", "quantize_affine")
)

#: PyTorch's own observers (``torch.quantization.*`` is the same objects as ``torch.ao.quantization.*``), its
#: fake-quantise module and functions, and its quantise functions compute the same parameters or integers.
_TORCH_QPARAMS = (
    *(f"torch.ao.quantization.observer.{name}" for name in (
        "MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
        "MovingAveragePerChannelMinMaxObserver", "HistogramObserver")),
    "torch.ao.quantization.fake_quantize.FakeQuantize",
    "torch.ao.quantization.utils.determine_qparams",
    "torch.fake_quantize_per_tensor_affine", "torch.fake_quantize_per_channel_affine",
    "torch.quantize_per_tensor", "torch.quantize_per_channel", "torch._choose_qparams_per_tensor",
)
_QPARAMS_SHORTCUTS = (*_TORCHAO_QPARAMS, *_TORCH_QPARAMS)

_INTEGER_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)

# --------------------------------------------------------------------------
# 23.quantize_asymmetric
# --------------------------------------------------------------------------


def _quantize_asymmetric(x: torch.Tensor, num_bits: int) -> tuple[torch.Tensor, float, int]:
    """Asymmetric (affine) per-tensor quantisation of ``x`` to signed ``num_bits``-bit integers.

    Args:
        x: a float tensor of any shape, not all zeros.
        num_bits: 2 to 16 (int32 holds every such range; int8 only up to 8 bits).

    Returns:
        ``(q, scale, zero_point)``: ``q`` an int32 tensor of the shape of
        ``x`` with values in ``[qmin, qmax] = [-2**(b-1), 2**(b-1) - 1]``;
        ``scale`` a Python float; ``zero_point`` a Python int in ``[qmin, qmax]``.
        The float range is widened to include 0 (so that 0 is represented
        exactly), ``scale = (hi - lo) / (qmax - qmin)``,
        ``zero_point = qmin - round(lo / scale)`` and
        ``q = clamp(round(x / scale) + zero_point, qmin, qmax)``: the
        conventions of torchao's ``choose_qparams_affine`` (ASYMMETRIC) and
        ``quantize_affine``.
    """
    qmin, qmax = -(2 ** (num_bits - 1)), 2 ** (num_bits - 1) - 1
    lo = min(x.min().item(), 0.0)
    hi = max(x.max().item(), 0.0)
    scale = (hi - lo) / (qmax - qmin)
    zero_point = int(min(max(qmin - round(lo / scale), qmin), qmax))
    q = torch.clamp(torch.round(x / scale) + zero_point, qmin, qmax).to(torch.int32)
    return q, scale, zero_point


@exercise(
    "23.quantize_asymmetric",
    "return (q, scale, zero_point) for asymmetric per-tensor quantisation of x to signed num_bits-bit integers "
    "(num_bits from 2 to 16) [qmin, qmax] = [-2**(num_bits-1), 2**(num_bits-1) - 1], as in the chapter's worked example: the range of x, "
    "widened to include 0, maps onto [qmin, qmax]; scale a Python float, zero_point a Python int, q an integer "
    "tensor (an integer dtype such as torch.int32) of the shape of x. Plain tensor operations: torchao's "
    "primitives, PyTorch's observers and its quantize / fake-quantize functions are refused.",
    reference=_quantize_asymmetric,
    shortcuts=_QPARAMS_SHORTCUTS,
    goal="the scale, zero point and integers",
    hint="Follow the worked example of 'What quantisation is': widen x's range so that it contains 0, "
         "spread it evenly over the signed integer range (count the steps between qmin and qmax, not the "
         "levels), and choose the integer zero point that puts the low end of the range on qmin. Then "
         "round, shift and clamp every value, store the result in an integer dtype, and return scale as a "
         "Python float and zero_point as a Python int.",
)
def _test_quantize_asymmetric(candidate) -> None:
    g = torch.Generator().manual_seed(23)
    cases = [
        ("a small tensor with both signs, 8 bits", torch.tensor([-0.6, 0.0, 0.3, 1.0, 1.9]), 8),
        ("normal values, 8 bits", torch.randn(4, 50, generator=g) * 0.7 + 0.2, 8),
        ("ReLU outputs (all >= 0), 8 bits", torch.rand(200, generator=g) * 3.0 + 0.5, 8),
        ("all negative values, 8 bits", -torch.rand(3, 7, generator=g) - 0.25, 8),
        ("normal values, 4 bits", torch.randn(64, generator=g), 4),
        ("skewed values, 3 bits", torch.rand(100, generator=g) * 5 - 1, 3),
        ("normal values, 16 bits", torch.randn(40, generator=g) * 2, 16),  # more than an int8 or uint8 holds
    ]
    for label, x, bits in cases:
        qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        want_q, want_scale, want_zp = _quantize_asymmetric(x, bits)
        result = candidate(x.clone(), bits)
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise AssertionError("return a tuple (q, scale, zero_point)")
        q, scale, zp = result
        expect_type(scale, float, f"{label}: scale")
        lo_raw, hi_raw = x.min().item(), x.max().item()
        if abs(scale - want_scale) > 1e-6 * want_scale:
            if abs(scale - (hi_raw - lo_raw) / (qmax - qmin)) < 1e-6 * want_scale:
                raise AssertionError(
                    f"{label}: scale {scale:.6g} comes from [x.min(), x.max()] = [{lo_raw:.3f}, {hi_raw:.3f}]; "
                    "widen the range to include 0 first (lo = min(x.min(), 0), hi = max(x.max(), 0)), so that "
                    f"0.0 (padding, a ReLU's zeros) is represented exactly; expected {want_scale:.6g}"
                )
            hi, lo = max(hi_raw, 0.0), min(lo_raw, 0.0)
            if abs(scale - (hi - lo) / 2**bits) < 1e-6 * want_scale:
                raise AssertionError(
                    f"{label}: scale {scale:.6g} divides by 2**{bits} = {2**bits}; {bits} bits give 2**{bits} levels "
                    f"but only qmax - qmin = {qmax - qmin} steps between them; expected {want_scale:.6g}"
                )
            raise AssertionError(f"{label}: scale should be (hi - lo) / (qmax - qmin) = {want_scale:.6g}, got {scale:.6g}")
        if isinstance(zp, float) and zp != round(zp):
            raise AssertionError(
                f"{label}: zero_point {zp:.4f} is not an integer; it is the integer that stands for 0.0, "
                "so round it: zero_point = qmin - round(lo / scale)"
            )
        expect_type(zp, int, f"{label}: zero_point")
        zp_value = zp
        if int(zp_value) != want_zp:
            if 0 <= want_zp - qmin < 2**bits and int(zp_value) == want_zp - qmin:
                raise AssertionError(
                    f"{label}: zero_point {int(zp_value)} is in the unsigned range [0, {2**bits - 1}]; this exercise "
                    f"uses signed integers [qmin, qmax] = [{qmin}, {qmax}]; expected {want_zp}"
                )
            if int(zp_value) == qmin + round(min(lo_raw, 0.0) / want_scale):
                raise AssertionError(
                    f"{label}: zero_point {int(zp_value)} has the sign of lo / scale the wrong way round: "
                    f"the float lo must map to qmin, so zero_point = qmin - round(lo / scale) = {want_zp}"
                )
            raise AssertionError(f"{label}: zero_point should be qmin - round(lo / scale) = {want_zp}, got {int(zp_value)}")
        if not isinstance(q, torch.Tensor) or q.shape != x.shape:
            raise AssertionError(f"{label}: q should be a tensor of the shape of x {tuple(x.shape)}")
        if q.is_floating_point() and not torch.equal(q, q.round()):
            raise AssertionError(f"{label}: q holds fractions; round(x / scale) before adding zero_point")
        if q.min().item() < qmin or q.max().item() > qmax:
            raise AssertionError(
                f"{label}: q has values in [{q.min().item()}, {q.max().item()}], outside [qmin, qmax] = [{qmin}, {qmax}]; "
                "use the signed range and clamp"
            )
        if q.dtype in _INTEGER_DTYPES and not (torch.iinfo(q.dtype).min <= qmin and qmax <= torch.iinfo(q.dtype).max):
            info = torch.iinfo(q.dtype)
            raise Hint(
                f"{label}: q has dtype {str(q.dtype).removeprefix('torch.')}, whose range [{info.min}, {info.max}] "
                f"does not hold [qmin, qmax] = [{qmin}, {qmax}]: the integers past its ends wrapped around "
                f"(q ranges over [{q.min().item()}, {q.max().item()}], expected [{want_q.min().item()}, "
                f"{want_q.max().item()}])",
                "an integer dtype keeps only its own range; converting a larger value wraps it around silently. "
                "Pick a dtype wide enough for every num_bits the task allows (torch.int16 for up to 16 bits, "
                "torch.int32 for any).",
            )
        diff = (q.to(torch.int64) - want_q.to(torch.int64)).abs()
        # at 16 bits float32 and float64 division round a few values either side of a .5 tie: allow 1 there
        wrong = (diff > (1 if bits > 8 else 0)).sum().item()
        if wrong:
            raise AssertionError(
                f"{label}: {wrong} of {x.numel()} values of q differ from clamp(round(x / scale) + zero_point, qmin, qmax)"
            )
        if q.dtype not in _INTEGER_DTYPES:
            raise Hint(
                f"{label}: q should be an integer tensor, got a {str(q.dtype).removeprefix('torch.')} tensor "
                "(its values are right).",
                "The integers are what a quantised model stores; convert the rounded, clamped values to an integer "
                "dtype wide enough for num_bits, such as torch.int32, with .to(dtype).",
            )


# --------------------------------------------------------------------------
# 23.per_channel_scales
# --------------------------------------------------------------------------


def _per_channel_scales(weight: torch.Tensor, num_bits: int) -> torch.Tensor:
    """Symmetric per-output-channel scales of a weight, as torchao and PyTorch's observers compute them.

    Args:
        weight: float ``[out_channels, ...]`` (a Linear's ``[out, in]`` or a
            convolution's ``[out, in, kh, kw]``).
        num_bits: 2 to 8; signed range ``[qmin, qmax] = [-2**(b-1), 2**(b-1) - 1]``.

    Returns:
        float ``[out_channels]``: ``max |w[c]| / ((qmax - qmin) / 2)``, the
        maximum taken over every dimension except 0 (127.5 in the denominator
        for 8 bits). The zero point of symmetric quantisation is 0.
    """
    qmin, qmax = -(2 ** (num_bits - 1)), 2 ** (num_bits - 1) - 1
    max_abs = weight.detach().abs().flatten(1).amax(dim=1)
    return max_abs / ((qmax - qmin) / 2)


@exercise(
    "23.per_channel_scales",
    "return a float tensor [out_channels] with the symmetric scale of each output channel (dim 0) of weight "
    "(a Linear's [out, in] or a convolution's [out, in, kh, kw]) for signed num_bits-bit integers, with the "
    "convention of torchao and PyTorch's observers (for 8 bits the largest magnitude maps to 127.5). Plain tensor "
    "operations: the observers themselves and torchao's primitives are refused.",
    reference=_per_channel_scales,
    shortcuts=_QPARAMS_SHORTCUTS,
    goal="the per-channel scales",
    hint="For each output channel (dim 0), find the largest magnitude over all the other dimensions at "
         "once (flatten them together or reduce over a tuple of dims), taking absolute values first, since "
         "a channel's largest magnitude can be negative. Divide it by the half-range of the convention in "
         "'What quantisation is': for 8 bits that is 127.5, not qmax = 127, so work out which combination "
         "of qmin and qmax gives it for any num_bits.",
)
def _test_per_channel_scales(candidate) -> None:
    g = torch.Generator().manual_seed(5)
    linear_w = torch.randn(16, 10, generator=g) * torch.logspace(-2, 0, 16).unsqueeze(1)
    linear_w[3] = -linear_w[3].abs()  # a channel whose largest magnitude is negative
    conv_w = torch.randn(8, 3, 3, 3, generator=g) * torch.linspace(0.05, 1.0, 8).view(8, 1, 1, 1)
    cases = [("a Linear weight [16, 10], 8 bits", linear_w, 8), ("a conv weight [8, 3, 3, 3], 8 bits", conv_w, 8),
             ("a Linear weight [16, 10], 4 bits", linear_w, 4)]
    for label, w, bits in cases:
        qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        want = _per_channel_scales(w, bits)
        got = candidate(w.clone(), bits)
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"return a tensor of {w.shape[0]} scales, got {type(got).__name__}")
        got = got.detach().float()
        if got.numel() == 1:
            raise AssertionError(
                f"{label}: you returned one scale for the whole tensor (per-tensor); return one scale per "
                f"output channel, shape [{w.shape[0]}]"
            )
        if got.shape != want.shape:
            if got.numel() == w.shape[1]:
                raise AssertionError(
                    f"{label}: you returned {got.numel()} scales, one per *input* channel; the output channels "
                    f"are dim 0, so reduce over every other dimension"
                )
            raise AssertionError(
                f"{label}: expected shape [{w.shape[0]}] (one scale per output channel, dim 0), got {list(got.shape)}; "
                "for a conv weight reduce over all dimensions except 0 (flatten the others into one, or give "
                "amax a tuple of dims)"
            )
        if torch.allclose(got, want, rtol=1e-5, atol=0):
            continue
        max_abs = w.abs().flatten(1).amax(dim=1)
        if torch.allclose(got, max_abs / qmax, rtol=1e-5, atol=0):
            raise AssertionError(
                f"{label}: you divided by qmax = {qmax}; torchao and PyTorch's observers divide max |w| by "
                f"(qmax - qmin) / 2 = {(qmax - qmin) / 2}"
            )
        if torch.allclose(got, w.flatten(1).amax(dim=1) / ((qmax - qmin) / 2), rtol=1e-5, atol=0):
            raise AssertionError(
                f"{label}: use the largest *absolute* value of each channel (w.abs()); a channel's largest "
                "magnitude can be negative"
            )
        raise AssertionError(f"{label}: expected {want[:4].tolist()} ... got {got[:4].tolist()} ...")
