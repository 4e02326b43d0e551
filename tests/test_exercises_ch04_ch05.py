"""Exercises of chapters 04 and 05: each reference passes its checker, an untouched
stub reads "not attempted", and realistic wrong answers fail with a hint."""

from __future__ import annotations

import pytest
import torch

from helpers.exercises import check, solution

NAMES = ["04.closed_form_fit", "04.mse_gradients", "05.normalization_constants", "05.top_confusions"]


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes(name):
    result = check(name, solution(name), show=False)
    assert result.passed, result.message


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_attempted(name):
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert check(name, stub, show=False).status == "not attempted"


def _fails(name, candidate, *hint_words):
    result = check(name, candidate, show=False)
    assert result.status == "failed", f"{name} accepted a wrong answer: {result}"
    for word in hint_words:
        assert word in result.message, f"hint for {name} should mention {word!r}: {result.message}"


# --------------------------------------------------------------------------
# 04.closed_form_fit
# --------------------------------------------------------------------------


def test_closed_form_fit_without_intercept_fails():
    def through_origin(x, y):  # forgets the column of ones
        return (x @ y / (x @ x)).item(), 0.0

    _fails("04.closed_form_fit", through_origin, "ones")


def test_closed_form_fit_with_mean_intercept_fails():
    def separate(x, y):  # right slope, but b = mean(y) ignores w * mean(x)
        xc = x - x.mean()
        w = (xc @ (y - y.mean()) / (xc @ xc)).item()
        return w, y.mean().item()

    _fails("04.closed_form_fit", separate)


def test_closed_form_fit_by_gradient_descent_with_too_few_steps_fails():
    def rough(x, y):
        w, b = torch.zeros(()), torch.zeros(())
        for _ in range(20):
            r = w * x + b - y
            w, b = w - 0.1 * 2 * (r * x).mean(), b - 0.1 * 2 * r.mean()
        return w.item(), b.item()

    _fails("04.closed_form_fit", rough)


def test_closed_form_fit_returning_a_tensor_of_two_is_accepted():
    def as_tensor(x, y):
        design = torch.stack([x, torch.ones_like(x)], dim=1)
        return torch.linalg.lstsq(design, y.unsqueeze(1)).solution.squeeze(1)

    assert check("04.closed_form_fit", as_tensor, show=False).passed


# --------------------------------------------------------------------------
# 04.mse_gradients
# --------------------------------------------------------------------------


def test_mse_gradients_without_factor_two_fails():
    def half(w, b, x, y):
        r = x @ w + b - y
        return x.T @ r / x.shape[0], r.mean()

    _fails("04.mse_gradients", half, "half")


def test_mse_gradients_with_wrong_sign_fails():
    def flipped(w, b, x, y):
        r = y - (x @ w + b)
        return 2 * x.T @ r / x.shape[0], 2 * r.mean()

    _fails("04.mse_gradients", flipped, "sign")


def test_mse_gradients_sum_instead_of_mean_fails():
    def summed(w, b, x, y):
        r = x @ w + b - y
        return 2 * x.T @ r, 2 * r.sum()

    _fails("04.mse_gradients", summed, "N times")


def test_mse_gradients_with_autograd_inside_passes():
    def via_autograd(w, b, x, y):
        with torch.enable_grad():
            w, b = w.clone().requires_grad_(), b.clone().requires_grad_()
            return torch.autograd.grad(((x @ w + b - y) ** 2).mean(), (w, b))

    assert check("04.mse_gradients", via_autograd, show=False).passed


# --------------------------------------------------------------------------
# 05.normalization_constants
# --------------------------------------------------------------------------


def test_normalization_constants_unscaled_fails():
    def unscaled(images):
        pixels = images.float()
        return pixels.mean().item(), pixels.std().item()

    _fails("05.normalization_constants", unscaled, "255")


def test_normalization_constants_per_image_std_fails():
    def per_image(images):
        pixels = images.float() / 255
        return pixels.mean().item(), pixels.flatten(1).std(dim=1).mean().item()

    _fails("05.normalization_constants", per_image, "per-image")


def test_normalization_constants_uint8_mean_crashes_and_fails():
    def no_float(images):
        return images.mean().item() / 255, 0.3  # uint8 mean raises in torch

    _fails("05.normalization_constants", no_float)


def test_normalization_constants_population_std_is_accepted():
    def population(images):
        pixels = images.float() / 255
        return pixels.mean().item(), pixels.std(correction=0).item()

    assert check("05.normalization_constants", population, show=False).passed


# --------------------------------------------------------------------------
# 05.top_confusions
# --------------------------------------------------------------------------


def test_top_confusions_including_diagonal_fails():
    def with_diagonal(cm, k):
        counts, flat = cm.flatten().sort(descending=True)
        c = cm.shape[1]
        return [(i // c, i % c, n) for n, i in zip(counts.tolist(), flat.tolist())][:k]

    _fails("05.top_confusions", with_diagonal, "diagonal")


def test_top_confusions_swapped_fails():
    def swapped(cm, k):
        return [(p, t, n) for t, p, n in solution("05.top_confusions")(cm, k)]

    _fails("05.top_confusions", swapped, "swapped")


def test_top_confusions_ascending_fails():
    def ascending(cm, k):
        return sorted(solution("05.top_confusions")(cm, k), key=lambda item: item[2])

    _fails("05.top_confusions", ascending, "order")


def test_top_confusions_keeping_zeros_fails():
    def with_zeros(cm, k):
        off = cm.clone().fill_diagonal_(0)
        counts, flat = off.flatten().topk(k)
        c = cm.shape[1]
        return [(i // c, i % c, n) for n, i in zip(counts.tolist(), flat.tolist())]

    _fails("05.top_confusions", with_zeros)


def test_top_confusions_with_tensors_in_tuples_is_accepted():
    def tensors(cm, k):
        off = cm.clone().fill_diagonal_(0)
        counts, flat = off.flatten().topk(k)
        c = cm.shape[1]
        return [(i // c, i % c, n) for n, i in zip(counts, flat) if n > 0]

    assert check("05.top_confusions", tensors, show=False).passed
