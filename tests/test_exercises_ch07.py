"""Exercises of chapter 07: each reference passes its checker, an untouched stub reads
"not attempted", and realistic wrong answers fail with a hint."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from helpers.exercises import check, hint, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 07.receptive_field
# --------------------------------------------------------------------------


def test_receptive_field_ignoring_stride_fails():
    def no_stride(layers):
        return 1 + sum(d * (k - 1) for k, _, d in layers)

    assert_rejected("07.receptive_field", no_stride, "stride")


def test_receptive_field_ignoring_dilation_fails():
    def no_dilation(layers):
        field, jump = 1, 1
        for k, s, _ in layers:
            field += (k - 1) * jump
            jump *= s
        return field

    assert_rejected("07.receptive_field", no_dilation, "dilation")


def test_receptive_field_summing_kernels_fails():
    def summed(layers):
        return sum(k for k, _, _ in layers)

    assert_rejected("07.receptive_field", summed, "sum of the kernel sizes")


def test_receptive_field_applying_own_stride_first_fails():
    def own_stride(layers):
        field, jump = 1, 1
        for k, s, d in layers:
            jump *= s
            field += d * (k - 1) * jump
        return field

    assert_rejected("07.receptive_field", own_stride, "own stride")


def test_receptive_field_hints_name_the_idea_not_the_recurrence():
    def no_stride(layers):
        return 1 + sum(d * (k - 1) for k, _, d in layers)

    def off_by_one(layers):
        return solution("07.receptive_field")(layers) + 1

    pasted = ("d * (k - 1)", "dilation * (kernel - 1)", "(kernel - 1)", "product of the strides")
    for candidate, words in ((no_stride, ("apart", "multiply")), (off_by_one, ("apart", "strides", "8 pixels"))):
        assert_rejected("07.receptive_field", candidate)
        fuller = hint("07.receptive_field", show=False)
        for word in words:
            assert word in fuller, f"the fuller hint should name the idea ({word!r}): {fuller}"
        for formula in pasted:
            assert formula not in fuller, f"the fuller hint should not paste the recurrence ({formula!r}): {fuller}"


def test_receptive_field_table_of_the_fixed_cases_fails():
    def table(layers):  # right on every stack the checker always uses, wrong on the random ones
        known = {
            ((3, 1, 1),): 3, ((3, 1, 1), (3, 1, 1)): 5, ((3, 1, 2),): 5,
            ((3, 1, 1), (2, 2, 1), (3, 1, 1)): 8, ((3, 1, 1), (3, 1, 1), (2, 2, 1)) * 3: 36,
            ((7, 2, 1), (3, 2, 1)): 11, ((3, 1, 1), (3, 1, 2), (3, 1, 4)): 15,
            ((3, 2, 1), (3, 1, 2), (5, 1, 1)): 19, (): 1,
        }
        return known.get(tuple(layers), 1)

    for want_layers, field in [([(3, 1, 1)] * 2, 5), ([(3, 1, 1), (3, 1, 1), (2, 2, 1)] * 3, 36)]:
        assert solution("07.receptive_field")(want_layers) == field, "the table above must hold the right answers"
    for _ in range(3):  # new random stacks on every check
        assert_rejected("07.receptive_field", table, "random stack")


def test_receptive_field_random_stacks_differ_between_checks():
    from helpers.exercises.ch07 import _random_stacks

    first, second = _random_stacks(4), _random_stacks(4)
    assert first != second, "the random stacks should be drawn anew on every check"
    for _, layers in first:
        assert any(s > 1 for _, s, _ in layers[:-1]) and any(d > 1 for _, _, d in layers)


def test_receptive_field_returning_a_tensor_or_float_fails():
    import torch

    def as_tensor(layers):
        return torch.tensor(float(solution("07.receptive_field")(layers)))

    def as_float(layers):
        return float(solution("07.receptive_field")(layers))

    assert_rejected("07.receptive_field", as_tensor, "Python int, got Tensor")
    assert_rejected("07.receptive_field", as_float, "Python int, got float")


def test_receptive_field_measured_with_a_convolution_is_refused():
    import torch
    import torch.nn.functional as F

    def measured(layers):  # runs the layers on a wide input and reads the span of the gradient
        x = torch.zeros(1, 1, 4096, requires_grad=True)
        y = x
        for k, s, d in layers:
            y = F.conv1d(y, torch.ones(1, 1, k), stride=s, dilation=d)
        y[0, 0, 0].backward()
        nz = (x.grad[0, 0] != 0).nonzero().flatten()
        return int(nz.max() - nz.min() + 1)

    assert_rejected("07.receptive_field", measured, "yourself", "`F.conv1d`")


def test_receptive_field_measured_with_layers_or_autograd_is_refused():
    import torch
    from torch import nn

    def with_modules(layers):  # the checker's own way: real layers
        nn.Sequential(*[nn.Conv1d(1, 1, k, s, dilation=d) for k, s, d in layers])
        return solution("07.receptive_field")(layers)

    def forward_probe(layers):  # a pooling stack, probed forward
        x = torch.zeros(1, 1, 512)
        for k, s, d in layers:
            x = torch.nn.functional.max_pool1d(x, k, s, dilation=d)
        return solution("07.receptive_field")(layers)

    def with_grad(layers):  # autograd through anything
        x = torch.ones(3, requires_grad=True)
        torch.autograd.grad(x.sum(), x)
        return solution("07.receptive_field")(layers)

    assert_rejected("07.receptive_field", with_modules, "yourself", "convolution layer")
    assert_rejected("07.receptive_field", forward_probe, "yourself", "`F.max_pool1d`")
    assert_rejected("07.receptive_field", with_grad, "yourself", "autograd")


def test_receptive_field_returning_a_string_fails():
    def text(layers):
        return str(solution("07.receptive_field")(layers))

    assert_rejected("07.receptive_field", text, "int")


# --------------------------------------------------------------------------
# 07.strip_prefix
# --------------------------------------------------------------------------


def test_strip_prefix_with_str_replace_fails():
    def replaced(state_dict, prefix):
        return OrderedDict((k.replace(prefix, ""), v) for k, v in state_dict.items())

    assert_rejected("07.strip_prefix", replaced, "str.replace")


def test_strip_prefix_with_lstrip_fails():
    def stripped(state_dict, prefix):
        return OrderedDict((k.lstrip(prefix), v) for k, v in state_dict.items())

    assert_rejected("07.strip_prefix", stripped, "lstrip")


def test_strip_prefix_hints_name_the_idea_not_the_fix():
    def replaced(state_dict, prefix):
        return OrderedDict((k.replace(prefix, ""), v) for k, v in state_dict.items())

    def stripped(state_dict, prefix):
        return OrderedDict((k.lstrip(prefix), v) for k, v in state_dict.items())

    for candidate in (replaced, stripped):
        first = assert_rejected("07.strip_prefix", candidate).message
        fuller = hint("07.strip_prefix", show=False)
        assert "leading occurrence" in fuller and "method" in fuller, fuller
        for fix in ("removeprefix", "len(prefix)", "startswith", "[len("):
            assert fix not in first and fix not in fuller, f"the hints should not paste the fix ({fix!r}): {first} / {fuller}"


def test_strip_prefix_removing_a_repeated_prefix_fails():
    def strip_all(key, prefix):
        while key.startswith(prefix):
            key = key[len(prefix):]
        return key

    def repeatedly(state_dict, prefix):
        return OrderedDict((strip_all(k, prefix), v) for k, v in state_dict.items())

    message = assert_rejected("07.strip_prefix", repeatedly, "again and again", "really named 'module'").message
    assert "str.replace" not in message, message


def test_strip_prefix_slicing_every_key_fails():
    def sliced(state_dict, prefix):
        return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items())

    assert_rejected("07.strip_prefix", sliced, "start with the prefix")


def test_strip_prefix_in_place_fails():
    def in_place(state_dict, prefix):
        for key in list(state_dict):
            if key.startswith(prefix):
                state_dict[key[len(prefix):]] = state_dict.pop(key)

    assert_rejected("07.strip_prefix", in_place, "in place")


def test_strip_prefix_in_place_and_returned_fails():
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    def torch_util(state_dict, prefix):
        consume_prefix_in_state_dict_if_present(state_dict, prefix)
        return state_dict

    assert_rejected("07.strip_prefix", torch_util, "unchanged")


def test_strip_prefix_copying_tensors_fails():
    def cloned(state_dict, prefix):
        return OrderedDict((k.removeprefix(prefix), v.clone()) for k, v in state_dict.items())

    assert_rejected("07.strip_prefix", cloned, "same tensor")


def test_strip_prefix_hard_coded_module_fails():
    def hard_coded(state_dict, prefix):
        return OrderedDict((k.removeprefix("module."), v) for k, v in state_dict.items())

    assert_rejected("07.strip_prefix", hard_coded, "prefix argument")


def test_strip_prefix_plain_dict_with_startswith_is_accepted():
    def plain(state_dict, prefix):
        out = {}
        for key, value in state_dict.items():
            out[key[len(prefix):] if key.startswith(prefix) else key] = value
        return out

    assert check("07.strip_prefix", plain, show=False).passed


def test_strip_prefix_with_an_unescaped_regex_fails():
    import re

    def regex(state_dict, prefix):  # "." in the pattern matches any character: "modules.0" loses "modules."
        return type(state_dict)((re.sub("^" + prefix, "", k), v) for k, v in state_dict.items())

    assert_rejected("07.strip_prefix", regex, "regular expression", "modules")


@pytest.mark.parametrize("route", ["autograd.backward", "func.grad", "functional.jacobian"])
def test_receptive_field_measured_through_other_autograd_routes_is_refused(route):
    def measured(layers):  # every layer written as sums of shifted slices (no convolution op), then autograd
        import torch

        def stack(x):
            for k, s, d in layers:
                n = x.shape[-1] - (k - 1) * d
                x = sum(x[..., i * d : i * d + n] for i in range(k))[..., ::s]
            return x

        size = 1 + sum((k - 1) * d for k, _, d in layers) * 8 + 8

        def centre(inp):
            out = stack(inp)
            return out[..., out.shape[-1] // 2].sum()

        x = torch.ones(1, 1, size, requires_grad=True)
        if route == "autograd.backward":
            torch.autograd.backward(centre(x))
            grad = x.grad
        elif route == "func.grad":
            grad = torch.func.grad(centre)(x)
        else:
            grad = torch.autograd.functional.jacobian(centre, x)
        return int((grad != 0).sum())

    assert_rejected("07.receptive_field", measured, "autograd" if route != "func.grad" else "torch.func")
