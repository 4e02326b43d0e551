"""Exercises of chapters 04 and 05: each reference passes its checker, an untouched
stub reads "not attempted", and realistic wrong answers fail with a hint."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import helpers.exercises as exercises
from helpers.exercises import check, hint, solution
from tests.exercise_support import assert_rejected


@pytest.fixture(autouse=True)
def _first_attempt(monkeypatch):
    """Every test starts with no failed attempts, so a hint's words are checked in the first tier."""
    monkeypatch.setattr(exercises, "_failures", Counter())
    monkeypatch.setattr(exercises, "_fuller", {})

# --------------------------------------------------------------------------
# 04.closed_form_fit
# --------------------------------------------------------------------------


def test_closed_form_fit_without_intercept_fails():
    def through_origin(x, y):  # forgets the column of ones
        return (x @ y / (x @ x)).item(), 0.0

    first = assert_rejected("04.closed_form_fit", through_origin, "no intercept", 'hint("04.closed_form_fit")').message
    assert "Hint:" not in first, f"the first failure should name the mistake only: {first}"
    assert "own column" in hint("04.closed_form_fit", show=False)


def test_closed_form_fit_with_mean_intercept_fails():
    def separate(x, y):  # right slope, but b = mean(y) ignores w * mean(x)
        xc = x - x.mean()
        w = (xc @ (y - y.mean()) / (xc @ xc)).item()
        return w, y.mean().item()

    assert_rejected("04.closed_form_fit", separate, "mean(y)", "mean 0")
    assert "together" in hint("04.closed_form_fit", show=False)


def test_closed_form_fit_by_gradient_descent_with_too_few_steps_fails():
    def rough(x, y):
        w, b = torch.zeros(()), torch.zeros(())
        for _ in range(20):
            r = w * x + b - y
            w, b = w - 0.1 * 2 * (r * x).mean(), b - 0.1 * 2 * r.mean()
        return w.item(), b.item()

    assert_rejected("04.closed_form_fit", rough, "w=")


def _fit_with(make_optimizer, steps):
    def fit(x, y):
        w, b = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
        opt = make_optimizer([w, b])

        def closure():
            opt.zero_grad()
            loss = ((w * x + b - y) ** 2).mean()
            loss.backward()
            return loss

        for _ in range(steps):
            opt.step(closure)
        return w.item(), b.item()

    return fit


@pytest.mark.parametrize("fit", [
    _fit_with(lambda p: torch.optim.LBFGS(p, max_iter=200, line_search_fn="strong_wolfe"), 1),  # exact enough
    _fit_with(lambda p: torch.optim.SGD(p, lr=0.01), 5),
    _fit_with(lambda p: torch.optim.Adam(p, lr=0.1), 5),
], ids=["LBFGS", "SGD", "Adam"])
def test_closed_form_fit_with_a_torch_optimizer_is_refused(fit):
    """An iterative fit, however precise (LBFGS lands within 1e-3), is not the closed form the task asks for."""
    assert_rejected("04.closed_form_fit", fit, "yourself", "`torch.optim` optimizer", "iterative")


def test_closed_form_fit_task_says_no_optimizer():
    assert "no torch.optim optimizer" in exercises.EXERCISES["04.closed_form_fit"].task


def test_closed_form_fit_by_the_normal_equations_is_accepted():
    def normal_equations(x, y):
        x64, y64 = x.double(), y.double()
        xm, ym = x64.mean(), y64.mean()
        w = ((x64 - xm) * (y64 - ym)).sum() / ((x64 - xm) ** 2).sum()
        return w.item(), (ym - w * xm).item()

    assert check("04.closed_form_fit", normal_equations, show=False).passed


def test_closed_form_fit_hints_do_not_paste_the_solution():
    def through_origin(x, y):
        return (x @ y / (x @ x)).item(), 0.0

    assert_rejected("04.closed_form_fit", through_origin)
    second = assert_rejected("04.closed_form_fit", through_origin, "Hint:").message
    for text in (second, hint("04.closed_form_fit", show=False), exercises.EXERCISES["04.closed_form_fit"].hint):
        assert "lstsq(" not in text and "mean(y) - w" not in text and "ones_like" not in text, text


def test_closed_form_fit_returning_tensors_is_refused():
    """The task asks for Python floats: the exact numbers in tensors are named as the wrong type."""

    def as_tensor(x, y):
        design = torch.stack([x, torch.ones_like(x)], dim=1)
        return torch.linalg.lstsq(design, y.unsqueeze(1)).solution.squeeze(1)

    def pair_of_tensors(x, y):
        w, b = as_tensor(x, y)
        return w, b

    for candidate in (as_tensor, pair_of_tensors):
        assert_rejected("04.closed_form_fit", candidate, "Python float", "Tensor")
        assert ".item()" in hint("04.closed_form_fit", show=False)

    def as_floats(x, y):
        w, b = as_tensor(x, y).tolist()
        return w, b

    assert check("04.closed_form_fit", as_floats, show=False).passed


# --------------------------------------------------------------------------
# 04.mse_gradients
# --------------------------------------------------------------------------


def test_mse_gradients_without_factor_two_fails():
    def half(w, b, x, y):
        r = x @ w + b - y
        return x.T @ r / x.shape[0], r.mean()

    assert_rejected("04.mse_gradients", half, "half")


def test_mse_gradients_with_wrong_sign_fails():
    def flipped(w, b, x, y):
        r = y - (x @ w + b)
        return 2 * x.T @ r / x.shape[0], 2 * r.mean()

    assert_rejected("04.mse_gradients", flipped, "wrong sign")


def test_mse_gradients_sum_instead_of_mean_fails():
    def summed(w, b, x, y):
        r = x @ w + b - y
        return 2 * x.T @ r, 2 * r.sum()

    assert_rejected("04.mse_gradients", summed, "N times", "sum of squares")


def test_mse_gradients_transposed_fails():
    def transposed(w, b, x, y):
        r = x @ w + b - y
        return 2 / x.shape[0] * (x @ r), 2 * r.mean()  # x where x.T belongs: runs only when N == D

    assert_rejected("04.mse_gradients", transposed, "wrong dimension", "transposed")


def test_mse_gradients_wrong_db_only_fails():
    def db_without_two(w, b, x, y):
        r = x @ w + b - y
        return 2 / x.shape[0] * (x.T @ r), r.mean()

    assert_rejected("04.mse_gradients", db_without_two, "dw is right but db is not")


def test_mse_gradients_first_hints_name_the_mistake_not_the_formula():
    def half(w, b, x, y):
        r = x @ w + b - y
        return x.T @ r / x.shape[0], r.mean()

    def summed(w, b, x, y):
        r = x @ w + b - y
        return 2 * x.T @ r, 2 * r.sum()

    first = assert_rejected("04.mse_gradients", half, 'hint("04.mse_gradients")').message
    second = assert_rejected("04.mse_gradients", summed, "Hint:").message
    fuller = exercises.EXERCISES["04.mse_gradients"].hint
    for text in (first, second, fuller):
        assert "x.T @" not in text and "2/N" not in text and "2 / N" not in text and "r.sum()" not in text, text
    assert "Hint:" not in first, first


def test_mse_gradients_dw_column_fails():
    def column(w, b, x, y):
        r = (x @ w + b - y).unsqueeze(1)  # [N, 1]
        return 2 / x.shape[0] * (x.T @ r), 2 / x.shape[0] * r.sum()  # dw [D, 1]

    assert_rejected("04.mse_gradients", column, "shape [", "broadcast")
    assert "unsqueeze" in hint("04.mse_gradients", show=False)


def test_mse_gradients_db_with_keepdim_fails():
    def kept(w, b, x, y):
        r = x @ w + b - y
        column = r.unsqueeze(1)  # [N, 1]
        return 2 / x.shape[0] * (x.T @ r), 2 / x.shape[0] * column.sum(dim=0, keepdim=True)  # db [1, 1]

    assert_rejected("04.mse_gradients", kept, "0-dim", "[1, 1]")
    assert "keepdim" in hint("04.mse_gradients", show=False)


def test_mse_gradients_db_of_shape_one_fails():
    def one(w, b, x, y):
        r = x @ w + b - y
        return 2 / x.shape[0] * (x.T @ r), 2 / x.shape[0] * r.sum().reshape(1)

    assert_rejected("04.mse_gradients", one, "0-dim")


@pytest.mark.parametrize("to_number", [lambda t: t.item(), float], ids=["item", "float"])
def test_mse_gradients_db_as_python_float_fails(to_number):
    """The task states db is a 0-dim tensor (shape []), like b: a Python float is the wrong type."""
    def as_float(w, b, x, y):
        r = x @ w + b - y
        return 2 / x.shape[0] * (x.T @ r), to_number(2 * r.mean())

    assert_rejected("04.mse_gradients", as_float, "db should be a tensor of shape []", "got a float")
    assert ".item()" in hint("04.mse_gradients", show=False)


def test_mse_gradients_dw_as_a_list_fails():
    def as_list(w, b, x, y):
        r = x @ w + b - y
        return (2 / x.shape[0] * (x.T @ r)).tolist(), 2 / x.shape[0] * r.sum()

    assert_rejected("04.mse_gradients", as_list, "dw should be a tensor of shape [6]", "got a list")


def test_mse_gradients_transposed_product_written_as_r_at_x_is_accepted():
    def r_at_x(w, b, x, y):
        r = x @ w + b - y
        return (2 * r / len(r)) @ x, (2 * r).mean()

    assert check("04.mse_gradients", r_at_x, show=False).passed


def _with_autograd_grad(w, b, x, y):
    with torch.enable_grad():
        w, b = w.clone().requires_grad_(), b.clone().requires_grad_()
        return torch.autograd.grad(((x @ w + b - y) ** 2).mean(), (w, b))


def _with_backward(w, b, x, y):
    with torch.enable_grad():
        w, b = w.clone().requires_grad_(), b.clone().requires_grad_()
        ((x @ w + b - y) ** 2).mean().backward()
        return w.grad, b.grad


def _with_autograd_backward(w, b, x, y):
    with torch.enable_grad():
        w, b = w.clone().requires_grad_(), b.clone().requires_grad_()
        torch.autograd.backward(((x @ w + b - y) ** 2).mean())
        return w.grad, b.grad


def _with_func_grad(w, b, x, y):
    return torch.func.grad(lambda w, b: ((x @ w + b - y) ** 2).mean(), argnums=(0, 1))(w, b)


def _with_func_vjp(w, b, x, y):
    loss, pull_back = torch.func.vjp(lambda w, b: ((x @ w + b - y) ** 2).mean(), w, b)
    return pull_back(torch.ones_like(loss))


def _with_func_jacrev(w, b, x, y):
    return torch.func.jacrev(lambda w, b: ((x @ w + b - y) ** 2).mean(), argnums=(0, 1))(w, b)


def _with_functional_jacobian(w, b, x, y):
    return torch.autograd.functional.jacobian(lambda w, b: ((x @ w + b - y) ** 2).mean(), (w, b))


@pytest.mark.parametrize("candidate, used", [
    (_with_autograd_grad, "torch.autograd.grad"),
    (_with_backward, "torch.Tensor.backward"),
    (_with_autograd_backward, "torch.autograd.backward"),
    (_with_func_grad, "torch.func.grad"),
    (_with_func_vjp, "torch.func.vjp"),
    (_with_func_jacrev, "torch.func.jacrev"),
    (_with_functional_jacobian, "torch.autograd.functional.jacobian"),
])
def test_mse_gradients_from_autograd_are_refused(candidate, used):
    assert_rejected("04.mse_gradients", candidate, f"`{used}`", "by hand")


def test_mse_gradients_autograd_refusal_cannot_be_swallowed():
    def swallowed(w, b, x, y):
        try:
            return _with_backward(w, b, x, y)
        except AssertionError:
            return solution("04.mse_gradients")(w, b, x, y)

    assert_rejected("04.mse_gradients", swallowed, "`torch.Tensor.backward`")


# --------------------------------------------------------------------------
# 05.normalization_constants
# --------------------------------------------------------------------------


def test_normalization_constants_unscaled_fails():
    def unscaled(images):
        pixels = images.float()
        return pixels.mean().item(), pixels.std().item()

    assert_rejected("05.normalization_constants", unscaled, "255")


def test_normalization_constants_per_image_std_fails():
    def per_image(images):
        pixels = images.float() / 255
        return pixels.mean().item(), pixels.flatten(1).std(dim=1).mean().item()

    assert_rejected("05.normalization_constants", per_image, "per-image")


def test_normalization_constants_of_the_ink_only_fails():
    def ink_only(images):  # nearly right on noise images without background; far off on MNIST (81 % black)
        pixels = images.float() / 255
        pixels = pixels[pixels > 0]
        return pixels.mean().item(), pixels.std().item()

    assert_rejected("05.normalization_constants", ink_only, "non-zero pixels", "background")


def test_normalization_constants_for_one_fixed_input_fails():
    first = {}

    def memorised(images):  # right for the first input it sees, then repeats that answer
        if not first:
            pixels = images.double() / 255
            first["answer"] = (pixels.mean().item(), pixels.std().item())
        return first["answer"]

    assert_rejected("05.normalization_constants", memorised, "20x20")


def test_normalization_constants_uint8_mean_crashes_and_fails():
    def no_float(images):
        return images.mean().item() / 255, 0.3  # uint8 mean raises in torch

    assert_rejected("05.normalization_constants", no_float)


def test_normalization_constants_tensors_fail():
    def tensors(images):  # 0-dim tensors, where the task asks for Python floats
        pixels = images.float() / 255
        return pixels.mean(), pixels.std()

    assert_rejected("05.normalization_constants", tensors, "Python float", "Tensor")


def test_normalization_constants_numpy_floats_are_accepted():
    def with_numpy(images):  # numpy.float64 is a subclass of Python's float
        pixels = images.numpy() / 255
        return pixels.mean(), pixels.std(ddof=1)

    assert check("05.normalization_constants", with_numpy, show=False).passed


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

    assert_rejected("05.top_confusions", with_diagonal, "diagonal")


def test_top_confusions_swapped_fails():
    def swapped(cm, k):
        return [(p, t, n) for t, p, n in solution("05.top_confusions")(cm, k)]

    assert_rejected("05.top_confusions", swapped, "swapped")


def test_top_confusions_ascending_fails():
    def ascending(cm, k):
        return sorted(solution("05.top_confusions")(cm, k), key=lambda item: item[2])

    assert_rejected("05.top_confusions", ascending, "order")


def test_top_confusions_keeping_zeros_fails():
    def with_zeros(cm, k):
        off = cm.clone().fill_diagonal_(0)
        counts, flat = off.flatten().topk(k)
        c = cm.shape[1]
        return [(i // c, i % c, n) for n, i in zip(counts.tolist(), flat.tolist())]

    assert_rejected("05.top_confusions", with_zeros, "count 0")


def test_top_confusions_with_tensors_in_tuples_fails():
    def tensors(cm, k):  # the task asks for tuples of ints: 0-dim tensors are not
        off = cm.clone().fill_diagonal_(0)
        counts, flat = off.flatten().sort(descending=True, stable=True)
        c = cm.shape[1]
        return [(i // c, i % c, n) for n, i in zip(counts[:k], flat[:k]) if n > 0]

    assert_rejected("05.top_confusions", tensors, "Python ints", "tensor")


def test_top_confusions_tensor_counts_fail():
    def tensor_counts(cm, k):  # indices are ints, the counts are cm[i, j], 0-dim tensors
        c = cm.shape[0]
        cells = [(i, j, cm[i, j]) for i in range(c) for j in range(c) if i != j and cm[i, j] > 0]
        return sorted(cells, key=lambda cell: -int(cell[2]))[:k]

    first = assert_rejected("05.top_confusions", tensor_counts, "tensor(9)", "torch.int64 tensor", "not a Python int")
    assert ".tolist()" not in first.message, f"the first tier names the mistake, not the fix: {first.message}"


def test_top_confusions_largest_mistake_per_row_fails():
    def per_row(cm, k):  # only the biggest mistake of each true class
        off = cm.clone().fill_diagonal_(0)
        counts, predicted = off.max(dim=1)
        rows = counts.argsort(descending=True).tolist()
        return [(r, int(predicted[r]), int(counts[r])) for r in rows if counts[r] > 0][:k]

    assert_rejected("05.top_confusions", per_row, "[(0, 1, 9), (0, 2, 7), (3, 0, 5)]", "only the largest mistake of each row")
    assert "across rows" in hint("05.top_confusions", show=False)


def _ties_reversed(cm, k):  # largest count first, but equal counts in reverse row-major order
    c = cm.shape[1]
    cells = [(t, p, int(cm[t, p])) for t in range(c) for p in range(c) if t != p and cm[t, p] > 0]
    return sorted(cells, key=lambda cell: (-cell[2], -(cell[0] * c + cell[1])))[:k]


def test_top_confusions_ties_in_another_order_fail():
    first = assert_rejected("05.top_confusions", _ties_reversed, "with ties", "[[10, 3, 3], [3, 10, 0], [0, 3, 10]]",
                            "row-major", 'hint("05.top_confusions")').message
    assert "stable" not in first, f"the first tier names the mistake, not the fix: {first}"
    nudge = hint("05.top_confusions", show=False)
    assert "keep equal values" in nudge, nudge


def test_top_confusions_ties_by_column_first_fail():
    def column_major(cm, k):  # equal counts ordered by predicted class, then true class
        c = cm.shape[1]
        cells = [(t, p, int(cm[t, p])) for t in range(c) for p in range(c) if t != p and cm[t, p] > 0]
        return sorted(cells, key=lambda cell: (-cell[2], cell[1], cell[0]))[:k]

    assert_rejected("05.top_confusions", column_major, "row-major")


def test_top_confusions_random_predictions_are_checked():
    def right_on_small_cases_only(cm, k):  # the reference, except on a 6 x 6 matrix (only the random case)
        answer = solution("05.top_confusions")(cm, k)
        return answer if cm.shape[0] != 6 else answer[:-1]

    assert_rejected("05.top_confusions", right_on_small_cases_only, "of random predictions")


def test_top_confusions_sorted_python_cells_are_accepted():
    def plain_python(cm, k):  # Python's sort is stable: equal counts stay in row-major order
        c = cm.shape[1]
        cells = [(t, p, int(cm[t, p])) for t in range(c) for p in range(c) if t != p and cm[t, p] > 0]
        return sorted(cells, key=lambda cell: -cell[2])[:k]

    assert check("05.top_confusions", plain_python, show=False).passed


def test_top_confusions_hints_do_not_paste_the_solution():
    text = exercises.EXERCISES["05.top_confusions"].hint
    assert "fill_diagonal_(0)" not in text and "i // c" not in text and "i % c" not in text, text
    for api in ("stable=True", "Tensor.sort", "divmod", "topk"):  # the nudge leaves API names to solution()
        assert api not in text, f"the hint names {api}: {text}"


def test_top_confusions_float_counts_fail():
    def fractional(cm, k):  # 9 -> 9.4: the checker must not round it away with int()
        return [(t, p, n + 0.4) for t, p, n in solution("05.top_confusions")(cm, k)]

    assert_rejected("05.top_confusions", fractional, "9.4", "ints")


def test_top_confusions_whole_float_counts_fail():
    def from_float_matrix(cm, k):
        return solution("05.top_confusions")(cm.float(), k)  # counts come back as 9.0, 7.0, ...

    assert_rejected("05.top_confusions", from_float_matrix, "9.0", "ints")


def test_top_confusions_with_numpy_integers_fails():
    def with_numpy(cm, k):
        import numpy as np

        off = cm.numpy().copy()
        np.fill_diagonal(off, 0)
        order = np.argsort(-off, axis=None, kind="stable")
        c = off.shape[0]
        return [(i // c, i % c, off.flat[i]) for i in order if off.flat[i] > 0][:k]  # np.int64 values

    assert_rejected("05.top_confusions", with_numpy, "Python ints", "int64")


# --------------------------------------------------------------------------
# 05.train_step
# --------------------------------------------------------------------------


def test_train_step_without_zero_grad_fails():
    def accumulating(model, batch, optimizer):
        x, y = batch
        model.train()
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # adds to the gradients of the previous step
        optimizer.step()
        return loss.item()

    assert_rejected("05.train_step", accumulating, "previous steps", "adds into .grad")


def test_train_step_with_softmax_before_cross_entropy_fails():
    def probabilities(model, batch, optimizer):
        x, y = batch
        model.train()
        loss = F.cross_entropy(model(x).softmax(dim=1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    assert_rejected("05.train_step", probabilities, "probabilities", "logits")


def test_train_step_with_softmax_only_in_backward_fails():
    def probabilities_behind_the_scenes(model, batch, optimizer):  # reports the right loss, trains on the wrong one
        x, y = batch
        model.train()
        logits = model(x)
        optimizer.zero_grad()
        F.cross_entropy(logits.softmax(dim=1), y).backward()
        optimizer.step()
        return F.cross_entropy(logits, y).item()

    assert_rejected("05.train_step", probabilities_behind_the_scenes, "probabilities", "raw logits")


def test_train_step_clearing_gradients_between_backward_and_step_fails():
    def cleared_too_late(model, batch, optimizer):
        x, y = batch
        model.train()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.zero_grad()  # wipes the gradients the step needs
        optimizer.step()
        return loss.item()

    assert_rejected("05.train_step", cleared_too_late, "did not change")


def test_train_step_with_its_own_optimizer_fails():
    def fresh_optimizer(model, batch, optimizer):  # same learning rate, but none of the given optimizer's state
        x, y = batch
        model.train()
        own = torch.optim.SGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])
        loss = F.cross_entropy(model(x), y)
        own.zero_grad()
        loss.backward()
        own.step()
        return loss.item()

    assert_rejected("05.train_step", fresh_optimizer, "momentum", "new optimizer")


def test_train_step_stepping_twice_fails():
    def two_steps(model, batch, optimizer):
        x, y = batch
        model.train()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        optimizer.step()
        return loss.item()

    assert_rejected("05.train_step", two_steps, "once per call")


def test_train_step_in_eval_mode_fails():
    def no_train_mode(model, batch, optimizer):
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    assert_rejected("05.train_step", no_train_mode, "evaluation mode", "training mode")


def test_train_step_returning_the_loss_tensor_fails():
    def tensor(model, batch, optimizer):
        return torch.tensor(solution("05.train_step")(model, batch, optimizer), requires_grad=True) * 1

    assert_rejected("05.train_step", tensor, "tensor", "autograd graph", "Python float")


def test_train_step_with_summed_loss_fails():
    def summed(model, batch, optimizer):
        x, y = batch
        model.train()
        loss = F.cross_entropy(model(x), y, reduction="sum")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    assert_rejected("05.train_step", summed, "mean cross-entropy")


def test_train_step_variants_are_accepted():
    criterion = nn.CrossEntropyLoss()

    def zero_at_the_end(model, batch, optimizer):  # zero_grad after step: the next backward starts clean
        x, y = batch
        model.train()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        return loss.item()

    def log_softmax_and_nll(model, batch, optimizer):
        x, y = batch
        model.train(True)
        model.zero_grad(set_to_none=True)
        loss = F.nll_loss(F.log_softmax(model(x), dim=1), y)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    for candidate in (zero_at_the_end, log_softmax_and_nll):
        result = check("05.train_step", candidate, show=False)
        assert result.passed, f"{candidate.__name__}: {result.message}"


def test_train_step_checker_restores_grad_mode_when_the_answer_raises():
    def switches_off_then_crashes(model, batch, optimizer):
        torch.set_grad_enabled(False)
        raise RuntimeError("crashed with autograd off")

    result = check("05.train_step", switches_off_then_crashes, show=False)
    assert result.status == "failed" and "crashed with autograd off" in result.message
    assert torch.is_grad_enabled(), "the checker left autograd switched off"


# --------------------------------------------------------------------------
# 05.evaluate_accuracy
# --------------------------------------------------------------------------


def _accuracy_loop(model, loader):
    correct = seen = 0
    for x, y in loader:
        correct += (model(x).argmax(dim=1) == y).sum().item()
        seen += len(y)
    return correct / seen


def test_evaluate_accuracy_without_eval_mode_fails():
    def still_training(model, loader):
        with torch.no_grad():
            return _accuracy_loop(model, loader)

    assert_rejected("05.evaluate_accuracy", still_training, "training mode", "dropout", "batch norm")


def test_evaluate_accuracy_without_no_grad_fails():
    def recording(model, loader):
        model.eval()
        return _accuracy_loop(model, loader)

    assert_rejected("05.evaluate_accuracy", recording, "autograd was recording")


def test_evaluate_accuracy_detaching_instead_of_no_grad_fails():
    def detached(model, loader):  # the graph is built, then thrown away
        model.eval()
        return _accuracy_loop(lambda x: model(x).detach(), loader)

    assert_rejected("05.evaluate_accuracy", detached, "autograd was recording")


def test_evaluate_accuracy_mean_of_batch_accuracies_fails():
    @torch.no_grad()
    def batch_mean(model, loader):
        model.eval()
        accuracies = [(model(x).argmax(dim=1) == y).float().mean().item() for x, y in loader]
        return sum(accuracies) / len(accuracies)

    assert_rejected("05.evaluate_accuracy", batch_mean, "per-batch accuracies")


def test_evaluate_accuracy_dividing_by_batches_times_batch_size_fails():
    """correct / (len(loader) * batch_size) counts the smaller last batch as full: named as such, not as the
    mean of per-batch accuracies (the two coincide on the checker's first loader)."""
    def batches_times_size(model, loader):
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum().item()
        return correct / (len(loader) * loader.batch_size)

    first = assert_rejected("05.evaluate_accuracy", batches_times_size, "36 / 64", "4 batches x batch_size 16",
                            "only 2", "36 / 60").message
    assert "per-batch" not in first and "len(loader.dataset)" not in first, first
    assert "len(loader.dataset)" in hint("05.evaluate_accuracy", show=False)


def test_evaluate_accuracy_as_percentage_fails():
    @torch.no_grad()
    def percent(model, loader):
        model.eval()
        return 100 * _accuracy_loop(model, loader)

    assert_rejected("05.evaluate_accuracy", percent, "percentage", "[0, 1]")


def test_evaluate_accuracy_returning_a_tensor_fails():
    @torch.no_grad()
    def tensor(model, loader):
        model.eval()
        correct = sum((model(x).argmax(dim=1) == y).sum() for x, y in loader)
        return correct / len(loader.dataset)

    assert_rejected("05.evaluate_accuracy", tensor, "tensor", "Python float")


def test_evaluate_accuracy_flattened_argmax_fails():
    @torch.no_grad()
    def no_dim(model, loader):  # argmax() with no dim: one flat index per batch, compared with every label
        model.eval()
        correct = sum((model(x).argmax() == y).sum().item() for x, y in loader)
        return correct / len(loader.dataset)

    first = assert_rejected("05.evaluate_accuracy", no_dim, "0.42", "flat index", "which dimension").message
    assert "every batch" not in first and "dim=1" not in first, first


def test_evaluate_accuracy_leaving_autograd_off_fails_and_is_undone():
    def global_switch(model, loader):
        torch.set_grad_enabled(False)  # never switched back on
        model.eval()
        return _accuracy_loop(model, loader)

    assert_rejected("05.evaluate_accuracy", global_switch, "switched off", "after it")
    assert torch.is_grad_enabled(), "the checker should restore autograd's grad mode"


def test_evaluate_accuracy_variants_are_accepted():
    def inference_mode(model, loader):
        model.eval()
        with torch.inference_mode():
            return _accuracy_loop(model, loader)

    @torch.no_grad()
    def restores_mode(model, loader):  # puts the model back in the mode it came in
        was_training = model.training
        model.train(False)
        try:
            correct = sum((model(x).softmax(dim=1).argmax(dim=1) == y).sum().item() for x, y in loader)
            return correct / len(loader.dataset)
        finally:
            model.train(was_training)

    for candidate in (inference_mode, restores_mode):
        result = check("05.evaluate_accuracy", candidate, show=False)
        assert result.passed, f"{candidate.__name__}: {result.message}"


def _mse_central_differences(w, b, x, y, h=1e-3):
    """Central differences in float64: exact on a quadratic, so only the checker's watch can refuse it."""
    w64, b64, x64, y64 = w.double(), b.double(), x.double(), y.double()

    def loss(w_, b_):
        return ((x64 @ w_ + b_ - y64) ** 2).mean()

    eye = torch.eye(len(w64), dtype=torch.float64)
    dw = torch.stack([(loss(w64 + h * e, b64) - loss(w64 - h * e, b64)) / (2 * h) for e in eye])
    db = (loss(w64, b64 + h) - loss(w64, b64 - h)) / (2 * h)
    return dw.float(), db.float()


def _mse_engine(w, b, x, y):
    """The autograd engine called directly: no public autograd function is named."""
    with torch.enable_grad():
        w_, b_ = w.detach().requires_grad_(), b.detach().requires_grad_()
        loss = ((x @ w_ + b_ - y) ** 2).mean()
        torch.autograd.Variable._execution_engine.run_backward((loss,), (torch.ones(()),), False, False, (), True, True)
    return w_.grad, b_.grad


def test_mse_gradients_central_differences_are_right_but_refused():
    import helpers.exercises.ch04 as ch04

    g = torch.Generator().manual_seed(0)
    x, y, w, b = torch.randn(7, 5, generator=g), torch.randn(7, generator=g), torch.randn(5, generator=g), torch.randn(())
    dw, db = _mse_central_differences(w, b, x, y)
    want_w, want_b = ch04._mse_gradients(w, b, x, y)
    assert torch.allclose(dw, want_w, atol=1e-4) and torch.allclose(db, want_b, atol=1e-4)
    assert_rejected("04.mse_gradients", _mse_central_differences, "finite", "differences")


def _mse_central_differences_elementwise(w, b, x, y, h=1e-3):
    """The same central differences with the products written as (x * w).sum(1) instead of x @ w."""
    w64, b64, x64, y64 = w.double(), b.double(), x.double(), y.double()

    def loss(w_, b_):
        return (((x64 * w_).sum(1) + b_ - y64) ** 2).mean()

    eye = torch.eye(len(w64), dtype=torch.float64)
    dw = torch.stack([(loss(w64 + h * e, b64) - loss(w64 - h * e, b64)) / (2 * h) for e in eye])
    db = (loss(w64, b64 + h) - loss(w64, b64 - h)) / (2 * h)
    return dw.float(), db.float()


def _mse_forward_differences_einsum(w, b, x, y, h=1e-3):
    """Forward differences (D + 1 loss evaluations) with the product written as einsum."""
    w64, b64, x64, y64 = w.double(), b.double(), x.double(), y.double()

    def loss(w_, b_):
        return ((torch.einsum("nd,d->n", x64, w_) + b_ - y64) ** 2).mean()

    base = loss(w64, b64)
    eye = torch.eye(len(w64), dtype=torch.float64)
    dw = torch.stack([(loss(w64 + h * e, b64) - base) / h for e in eye])
    return dw.float(), ((loss(w64, b64 + h) - base) / h).float()


def _mse_central_differences_by_columns(w, b, x, y, h=1e-4):
    """Central differences whose predictions are built from x's columns (indexing, which the product
    count exempts) in float64: no product or sum with x itself. Only the squaring gives it away."""
    x64, y64, w64, b64 = x.double(), y.double(), w.double(), b.double()

    def loss(w_, b_):
        prediction = sum(x64[:, k] * w_[k] for k in range(x.shape[1])) + b_
        return ((prediction - y64) ** 2).mean()

    eye = torch.eye(len(w64), dtype=torch.float64)
    dw = torch.stack([(loss(w64 + h * e, b64) - loss(w64 - h * e, b64)) / (2 * h) for e in eye])
    db = (loss(w64, b64 + h) - loss(w64, b64 - h)) / (2 * h)
    return dw.float(), db.float()


def _mse_forward_differences_batched_view(w, b, x, y, h=1e-3):
    """Every nudged weight vector in one product with x[None] (a [1, N, D] view of x)."""
    nudged = w[:, None] + h * torch.eye(len(w))  # [D, D]
    base = ((x @ w + b - y) ** 2).mean()
    losses = (((x[None] @ nudged.T[..., None]).squeeze(-1) + b - y) ** 2).mean(1)  # [D]
    return (losses - base) / h, ((((x @ w + b + h - y) ** 2).mean()) - base) / h



@pytest.mark.parametrize("candidate", [_mse_central_differences_elementwise, _mse_forward_differences_einsum,
                                       _mse_central_differences_by_columns, _mse_forward_differences_batched_view])
def test_mse_gradients_finite_differences_in_other_forms_are_refused(candidate):
    g = torch.Generator().manual_seed(2)
    x, y, w, b = torch.randn(7, 5, generator=g), torch.randn(7, generator=g), torch.randn(5, generator=g), torch.randn(())
    import helpers.exercises.ch04 as ch04

    want_w, want_b = ch04._mse_gradients(w, b, x, y)
    dw, db = candidate(w, b, x, y)
    assert torch.allclose(dw, want_w, atol=2e-2) and torch.allclose(db, want_b, atol=2e-2), "the route must be right"
    assert_rejected("04.mse_gradients", candidate, "finite", "differences")


def _mse_central_differences_one_product(w, b, x, y, h=1e-3):
    """Central differences with every nudged weight vector in one matrix: a single product with x."""
    w64, b64, x64, y64 = w.double(), b.double(), x.double(), y.double()
    eye = torch.eye(len(w64), dtype=torch.float64)
    nudged = torch.cat([w64[:, None] + h * eye, w64[:, None] - h * eye], dim=1)  # [D, 2D]
    losses = ((x64 @ nudged + b64 - y64[:, None]) ** 2).mean(0)  # [2D]
    d = len(w64)
    dw = (losses[:d] - losses[d:]) / (2 * h)
    base = x64 @ w64 - y64
    db = (((base + b64 + h) ** 2).mean() - ((base + b64 - h) ** 2).mean()) / (2 * h)
    return dw.float(), db.float()


def _mse_central_differences_in_numpy(w, b, x, y, h=1e-3):
    """Central differences on NumPy copies: no torch product with x at all."""
    import numpy as np

    w64, x64, y64, b64 = w.numpy().astype(np.float64), x.numpy().astype(np.float64), y.numpy().astype(np.float64), float(b)

    def loss(w_, b_):
        return float(((x64 @ w_ + b_ - y64) ** 2).mean())

    eye = np.eye(len(w64))
    dw = [(loss(w64 + h * e, b64) - loss(w64 - h * e, b64)) / (2 * h) for e in eye]
    db = (loss(w64, b64 + h) - loss(w64, b64 - h)) / (2 * h)
    return torch.tensor(dw, dtype=torch.float32), torch.tensor(db, dtype=torch.float32)


def test_mse_gradients_batched_or_numpy_finite_differences_are_refused():
    import helpers.exercises.ch04 as ch04

    g = torch.Generator().manual_seed(3)
    x, y, w, b = torch.randn(7, 5, generator=g), torch.randn(7, generator=g), torch.randn(5, generator=g), torch.randn(())
    want_w, want_b = ch04._mse_gradients(w, b, x, y)
    for candidate in (_mse_central_differences_one_product, _mse_central_differences_in_numpy):
        dw, db = candidate(w, b, x, y)
        assert torch.allclose(dw, want_w, atol=1e-3) and torch.allclose(db, want_b, atol=1e-3), candidate.__name__
    assert_rejected("04.mse_gradients", _mse_central_differences_one_product, "matrix", "finite differences")
    assert_rejected("04.mse_gradients", _mse_central_differences_in_numpy, "NumPy", "torch operations")


def test_mse_gradients_elementwise_and_per_feature_answers_are_accepted():
    def elementwise(w, b, x, y):
        r = (x * w).sum(1) + b - y
        return 2 * (r[:, None] * x).mean(0), 2 * r.mean()

    def per_feature(w, b, x, y):
        r = x.double() @ w.double() + b - y
        n = len(x)
        return torch.stack([2 / n * (r * x[:, j]).sum() for j in range(x.shape[1])]).float(), (2 / n * r.sum()).float()

    def column_residuals(w, b, x, y):  # products with a single column are still vector products
        r = (x @ w[:, None]).squeeze(1) + b - y
        return (2 / len(x)) * (r[None, :] @ x).squeeze(0), 2 * r.mean()

    for candidate in (elementwise, per_feature, column_residuals):
        result = check("04.mse_gradients", candidate, show=False)
        assert result.passed, f"{candidate.__name__}: {result.message}"


def test_mse_gradients_through_the_autograd_engine_is_refused():
    import helpers.exercises.ch04 as ch04

    g = torch.Generator().manual_seed(1)
    x, y, w, b = torch.randn(6, 3, generator=g), torch.randn(6, generator=g), torch.randn(3, generator=g), torch.randn(())
    dw, db = _mse_engine(w, b, x, y)
    want_w, want_b = ch04._mse_gradients(w, b, x, y)
    assert torch.allclose(dw, want_w, atol=1e-5) and torch.allclose(db, want_b, atol=1e-5), "the route must be right"
    assert_rejected("04.mse_gradients", _mse_engine, "required grad", "by hand")


# --------------------------------------------------------------------------
# 05.train_step and 05.evaluate_accuracy: the course's own helpers are no answer
# --------------------------------------------------------------------------


def _step_by_helper(model, batch, optimizer):
    from helpers.training import train_one_epoch

    return train_one_epoch(model, [batch], optimizer)[0]


def _accuracy_by_evaluate(model, loader):
    from helpers.training import evaluate

    return evaluate(model, loader)[1]


def _accuracy_by_predict(model, loader):
    from helpers.training import predict

    preds, targets = predict(model, loader)
    return (preds == targets).float().mean().item()


@pytest.mark.parametrize("name, candidate, used", [
    ("05.train_step", _step_by_helper, "helpers.training.train_one_epoch"),
    ("05.evaluate_accuracy", _accuracy_by_evaluate, "helpers.training.evaluate"),
    ("05.evaluate_accuracy", _accuracy_by_predict, "helpers.training.predict"),
], ids=["train_one_epoch", "evaluate", "predict"])
def test_chapter_05_loops_built_on_the_course_helpers_are_refused(name, candidate, used):
    """Chapter 05 imports helpers.training for its own run; calling it is not writing the step or the loop.
    Each of these answers computes the right number (the reference uses the same recipe)."""
    assert_rejected(name, candidate, f"`{used}`")


def _fit_by_polyfit(x, y):
    import numpy as np

    w, b = np.polyfit(x.double().numpy(), y.double().numpy(), 1)
    return float(w), float(b)


def _fit_by_polynomial_module(x, y):
    from numpy.polynomial import polynomial

    b, w = polynomial.polyfit(x.double().numpy(), y.double().numpy(), 1)
    return float(w), float(b)


@pytest.mark.parametrize("fit", [_fit_by_polyfit, _fit_by_polynomial_module], ids=["np.polyfit", "polynomial.polyfit"])
def test_closed_form_fit_by_a_library_line_fit_is_refused(fit):
    """A polynomial fit builds the design matrix itself, which is the exercise; both give the exact line."""
    assert_rejected("04.closed_form_fit", fit, "polynomial fit")



def test_mse_gradients_that_also_compute_the_loss_once_are_accepted():
    def with_loss(w, b, x, y):  # squaring once (to look at the loss) is not finite differences
        r = x @ w + b - y
        _ = (r**2).mean()
        return 2 * x.T @ r / len(y), 2 * r.mean()

    result = check("04.mse_gradients", with_loss, show=False)
    assert result.passed, result.message


def test_closed_form_fit_by_a_long_gradient_descent_is_refused():
    def converged(x, y):  # close enough to the exact line, but thousands of steps
        w, b = torch.zeros(()), torch.zeros(())
        for _ in range(5000):
            r = w * x + b - y
            w, b = w - 0.02 * 2 * (r * x).mean(), b - 0.02 * 2 * r.mean()
        return w.item(), b.item()

    assert_rejected("04.closed_form_fit", converged, "tensor operations", "iterative")


def test_mse_gradients_finite_differences_on_the_residual_with_einsum_are_refused():
    def residual_differences(w, b, x, y, h=1e-4):  # one product with x; the loss as einsum or a matrix product
        r = (x.double() @ w.double() + b - y).double()

        def loss(res):
            return torch.einsum("i,i->", res, res) / len(res)

        dw = torch.stack([(loss(r + h * x[:, i]) - loss(r - h * x[:, i])) / (2 * h) for i in range(x.shape[1])])
        db = ((r + h)[None] @ (r + h)[:, None] - (r - h)[None] @ (r - h)[:, None]).squeeze() / len(r) / (2 * h)
        return dw.float(), db.float()

    assert_rejected("04.mse_gradients", residual_differences, "finite differences")
