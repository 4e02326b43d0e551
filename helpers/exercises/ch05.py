"""Exercises of chapter 05 (an MLP on MNIST): checkers and reference solutions."""

from __future__ import annotations

import copy
import numbers

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from . import Hint, exercise, expect_type

# --------------------------------------------------------------------------
# 05.normalization_constants
# --------------------------------------------------------------------------


def _normalization_constants(images: torch.Tensor) -> tuple[float, float]:
    """Mean and standard deviation of all pixels, after scaling them to [0, 1].

    Args:
        images: uint8 ``[N, H, W]`` (0-255), e.g. ``MNIST(...).data``.

    Returns:
        ``(mean, std)`` as Python floats: one mean and one standard deviation
        over every pixel of every image (not per image), the values that
        ``transforms.v2.Normalize`` takes. For MNIST's training images they
        round to 0.1307 and 0.3081.
    """
    pixels = images.double() / 255
    return pixels.mean().item(), pixels.std().item()


def _bordered_images(n: int, size: int, border: int, seed: int) -> torch.Tensor:
    """uint8 [n, size, size] test images: a black frame ``border`` pixels wide (as MNIST's digits have) around a
    centre of per-image brightness plus noise, so the spread *between* images matters and many pixels are 0."""
    g = torch.Generator().manual_seed(seed)
    brightness = torch.randint(0, 160, (n, 1, 1), generator=g)
    noise = torch.randint(0, 96, (n, size, size), generator=g)
    images = (brightness + noise).to(torch.uint8)
    images[:, :border] = 0
    images[:, -border:] = 0
    images[:, :, :border] = 0
    images[:, :, -border:] = 0
    return images


@exercise(
    "05.normalization_constants",
    "return (mean, std) of all pixels of a uint8 tensor [N, 28, 28], after scaling the pixels "
    "to [0, 1]: one mean and one std over every pixel of every image, as Python floats (not tensors).",
    reference=_normalization_constants,
    hint="The section 'Normalisation constants, derived' computes exactly these two numbers for the "
         "training set; do the same for the images you are given. Convert to floating point and scale to "
         "[0, 1] first, then take one mean and one standard deviation over every pixel of every image "
         "together (averaging per-image statistics misses the spread between images), and return both as "
         "Python floats.",
)
def _test_normalization_constants(candidate) -> None:
    # Two inputs of different count and size; in both the average of per-image standard deviations is
    # clearly smaller than the pooled one, and statistics of the non-black pixels alone are far off.
    for images in (_bordered_images(64, 28, 4, seed=5), _bordered_images(23, 20, 3, seed=6)):
        _check_constants(candidate, images)


def _check_constants(candidate, images: torch.Tensor) -> None:
    pixels = images.double() / 255
    want_mean, want_std = pixels.mean().item(), pixels.std().item()
    result = candidate(images.clone())
    try:
        mean, std = result
    except (TypeError, ValueError) as exc:
        raise Hint(
            f"the task asks for two numbers (mean, std); your function returned {type(result).__name__}",
            "Return a tuple of two Python floats; a one-element tensor becomes one with .item().",
        ) from exc
    # The task says "as Python floats": a 0-dim tensor is not one (NumPy's float64 is a float subclass).
    expect_type(mean, float, "the mean you returned")
    expect_type(std, float, "the std you returned")
    shape = "x".join(map(str, images.shape))
    if abs(mean - 255 * want_mean) < 1e-2 * 255:
        raise AssertionError(
            f"your mean {mean:.2f} is on the 0-255 scale; divide the pixels by 255 first (as ToDtype(scale=True) does)"
        )
    ink = pixels[pixels > 0]
    if abs(mean - ink.mean().item()) < 1e-3:
        raise AssertionError(
            f"your mean {mean:.4f} is that of the non-zero pixels only; the black background counts too "
            f"(the mean of all pixels of these {shape} images is {want_mean:.4f})"
        )
    assert abs(mean - want_mean) < 1e-4, (
        f"the mean of all pixels in [0, 1] of these {shape} images is {want_mean:.4f}, you returned {mean:.4f}"
    )
    per_image_std = pixels.flatten(1).std(dim=1).mean().item()
    if abs(std - per_image_std) < 1e-3:
        raise AssertionError(
            f"your std {std:.4f} is the average of per-image standard deviations; "
            f"take one std over all pixels of all images (it is {want_std:.4f} here)"
        )
    assert abs(std - want_std) < 1e-4, (
        f"the std of all pixels in [0, 1] of these {shape} images is {want_std:.4f}, you returned {std:.4f}"
    )


# --------------------------------------------------------------------------
# 05.top_confusions
# --------------------------------------------------------------------------


def _top_confusions(cm: torch.Tensor, k: int) -> list[tuple[int, int, int]]:
    """The ``k`` most frequent mistakes in a confusion matrix.

    Args:
        cm: int ``[C, C]`` counts, ``cm[true, predicted]`` (as
            ``helpers.training.confusion_matrix`` returns).
        k: how many to return (at most).

    Returns:
        Up to ``k`` tuples ``(true, predicted, count)`` of Python ints, for
        off-diagonal cells with a count above zero, largest count first.
    """
    off_diagonal = cm.clone()
    off_diagonal.fill_diagonal_(0)
    counts, flat = off_diagonal.flatten().sort(descending=True, stable=True)
    c = cm.shape[1]
    return [(i // c, i % c, n) for n, i in zip(counts.tolist(), flat.tolist()) if n > 0][:k]


def _is_python_int(value) -> bool:
    """True for a Python int only: not for a bool (an int subclass), a NumPy integer or a 0-dim tensor."""
    return isinstance(value, int) and not isinstance(value, bool)


_INTS = "the task asks for a list of (true, predicted, count) tuples of Python ints, e.g. [(4, 9, 12), (7, 2, 9)]"


def _normalise_answer(result) -> list[tuple[int, int, int]]:
    try:
        items = [tuple(item) for item in result]
    except TypeError as exc:
        raise AssertionError(f"{_INTS}; got {type(result).__name__}") from exc
    out = []
    for item in items:
        if len(item) != 3:
            raise AssertionError(f"{_INTS}; one of your items is {item!r}")
        bad = next((v for v in item if not _is_python_int(v)), None)
        if bad is not None:
            kind = f"a {bad.dtype} tensor" if isinstance(bad, torch.Tensor) else f"type {type(bad).__name__}"
            whole = ""
            if isinstance(bad, float) or (isinstance(bad, torch.Tensor) and bad.dtype.is_floating_point):
                whole = " A count of mistakes is a whole number: it comes from the integer matrix, not from floats."
            raise Hint(
                f"{_INTS}; your item {item!r} contains {bad!r}, {kind}, not a Python int.{whole}",
                "Turn the values you read from the integer matrix into Python ints: .tolist() does that for "
                "a whole tensor, int() or .item() for one element.",
            )
        out.append(item)
    return out


@exercise(
    "05.top_confusions",
    "return the k most frequent mistakes in a confusion matrix cm[true, predicted] as a list of "
    "(true, predicted, count) tuples of Python ints (not tensors), largest count first, leaving out the "
    "diagonal (correct predictions) and zero counts. Equal counts keep the matrix's row-major order: the smaller true "
    "class first, and within one true class the smaller predicted class first.",
    reference=_top_confusions,
    hint="Take the diagonal out of the ranking, then rank every remaining cell of the flattened matrix "
    "together, across rows. Which ways of sorting promise to keep equal values in their original order? "
    "The flattened matrix is in row-major order, and a flat index together with the number of columns "
    "tells you the row and the column.",
)
def _test_top_confusions(candidate) -> None:
    cm = torch.tensor(
        [
            [50, 0, 3, 0],
            [1, 40, 0, 7],
            [0, 9, 45, 0],
            [5, 0, 2, 60],
        ]
    )
    want = [(2, 1, 9), (1, 3, 7), (3, 0, 5)]
    got = _normalise_answer(candidate(cm.clone(), 3))
    if got and all(t == p for t, p, _ in got):
        raise Hint(
            f"for cm = {cm.tolist()} you returned {got}: those are diagonal cells, the correct predictions.",
            "A mistake is a cell whose row (true class) and column (predicted class) differ; take the "
            "diagonal out of the ranking before you sort.",
        )
    if any(t == p for t, p, _ in got):
        raise Hint(
            f"for cm = {cm.tolist()} you returned {got}, which contains a diagonal cell (a correct prediction).",
            "Take the diagonal out of the ranking before you sort.",
        )
    if got == [(p, t, n) for t, p, n in want]:
        raise Hint(
            f"for cm = {cm.tolist()} you returned {got}: true and predicted are swapped.",
            "cm[true, predicted]: the row index is the true class, the column index the predicted one.",
        )
    if sorted(got) == sorted(want) and got != want:
        raise Hint(
            f"for cm = {cm.tolist()} you returned the right cells in the wrong order: {got}; expected {want}.",
            "Largest count first: sort in descending order.",
        )
    assert got == want, f"for cm = {cm.tolist()} and k = 3 the answer is {want}, you returned {got}"
    # k larger than the number of mistakes: only cells with a count above zero
    small = torch.tensor([[8, 2, 0], [0, 9, 0], [0, 1, 7]])
    got = _normalise_answer(candidate(small.clone(), 5))
    want = [(0, 1, 2), (2, 1, 1)]
    if got != want and any(n == 0 for _, _, n in got):
        raise Hint(
            f"for cm = {small.tolist()} and k = 5 the answer is {want}, you returned {got}: with fewer than "
            "k mistakes, your list is padded with cells of count 0, which are no mistakes.",
            "Filter out the zero counts after ranking; the list may then be shorter than k.",
        )
    assert got == want, f"for cm = {small.tolist()} and k = 5 the answer is {want}, you returned {got}"
    # Two big mistakes in one row: taking only the largest mistake of each true class
    # (the maximum of each row) misses (0, 2, 7).
    rows = torch.tensor([[50, 9, 7, 0], [0, 40, 0, 0], [0, 0, 45, 0], [5, 0, 0, 60]])
    got = _normalise_answer(candidate(rows.clone(), 3))
    want = [(0, 1, 9), (0, 2, 7), (3, 0, 5)]
    if got != want and (0, 2, 7) not in got:
        raise Hint(
            f"for cm = {rows.tolist()} and k = 3 the answer is {want}: row 0 holds the two biggest "
            f"mistakes, but you returned {got}, as if you kept only the largest mistake of each row.",
            "Rank all off-diagonal cells together, across rows, not row by row.",
        )
    assert got == want, f"for cm = {rows.tolist()} and k = 3 the answer is {want}, you returned {got}"
    # Ties: four cells share the count 3, and the task fixes their order (row-major).
    ties = torch.tensor([[10, 3, 3], [3, 10, 0], [0, 3, 10]])
    _check_against_reference(candidate, ties, 3, "with ties")
    # The confusion matrix of random predictions: many equal counts and some zeros, at several k.
    g = torch.Generator().manual_seed(5)
    for c, n, k in [(6, 120, 8), (4, 40, 20)]:
        targets, preds = torch.randint(c, (n,), generator=g), torch.randint(c, (n,), generator=g)
        noisy = torch.bincount(targets * c + preds, minlength=c * c).reshape(c, c)
        _check_against_reference(candidate, noisy, k, "of random predictions")


def _check_against_reference(candidate, cm: torch.Tensor, k: int, what: str) -> None:
    want = _top_confusions(cm, k)
    got = _normalise_answer(candidate(cm.clone(), k))
    if got == want:
        return
    case = f"for the confusion matrix {what} cm = {cm.tolist()} and k = {k} the answer is {want}; you returned {got}."
    same_counts = [n for _, _, n in got] == [n for _, _, n in want]
    if same_counts:
        raise Hint(
            f"{case} The counts are right, but cells with equal counts come in another order than the "
            "task's: row-major (smaller true class first, then smaller predicted class).",
            "Not every way of sorting promises to keep equal values in the order they came in; which "
            "ones do? The flattened matrix is in row-major order.",
        )
    raise Hint(f"{case}", "Compare with the task: the diagonal out, zero counts out, largest count first, at most k.")


# --------------------------------------------------------------------------
# What 05.train_step and 05.evaluate_accuracy share
# --------------------------------------------------------------------------


class _ModeRecorder(nn.Module):
    """An identity layer that notes, at every forward, ``(self.training, torch.is_grad_enabled())``.

    Placed inside a checker's model, it tells whether the learner's code ran
    the forward pass in training or evaluation mode, and whether autograd
    was recording.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append((self.training, torch.is_grad_enabled()))
        return x


def _call_keeping_grad_mode(candidate, *args):
    """``candidate(*args)``, with autograd's grad mode put back afterwards, even if it raises.

    Raises:
        AssertionError: the candidate returned with grad mode changed for
            everything that runs after it (e.g. a bare ``torch.set_grad_enabled(False)``).
    """
    enabled = torch.is_grad_enabled()
    try:
        result = candidate(*args)
    finally:
        changed = torch.is_grad_enabled() != enabled
        torch.set_grad_enabled(enabled)
    if changed:
        raise AssertionError(
            "your function returned with autograd's recording switched "
            + ("off" if enabled else "on")
            + " for all the code that runs after it (the next training step would have no gradients). "
            "Limit the change to the evaluation itself, with a with-block or a decorator."
        )
    return result


def _as_python_float(result, what: str) -> float:
    """``result`` as a float when it is a real Python or NumPy number; a tensor or anything else fails."""
    if isinstance(result, torch.Tensor):
        if result.grad_fn is not None:
            raise AssertionError(
                f"you returned {what} as a tensor that still holds its autograd graph; return a Python float. "
                "A training loop that keeps such tensors (say, to average an epoch's losses) keeps every "
                "step's graph alive in memory."
            )
        raise AssertionError(f"you returned {what} as a tensor; return a Python float, the plain number that printing and logging expect")
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        raise AssertionError(f"return {what} as a Python float; got {type(result).__name__}")
    return float(result)


# --------------------------------------------------------------------------
# 05.train_step
# --------------------------------------------------------------------------


def _train_step(model: nn.Module, batch, optimizer: torch.optim.Optimizer) -> float:
    """One optimisation step of a classifier: the five-step loop of chapter 04, once.

    Args:
        model: maps inputs ``x [B, ...]`` to logits ``[B, C]``.
        batch: ``(x, y)``, with ``y`` int64 class indices ``[B]`` on the model's device.
        optimizer: built over ``model.parameters()``.

    Returns:
        The batch's mean cross-entropy, computed before the update, as a Python float.

    Puts the model in training mode first, because it may arrive in
    evaluation mode (as an evaluation leaves it). ``F.cross_entropy`` takes
    logits: it applies ``log_softmax`` itself. The gradients are cleared
    before ``backward()``, which adds into ``.grad``.
    """
    x, y = batch
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


# SGD with momentum: the optimizer carries a buffer from step to step, so only the optimizer the
# learner was given, stepped once per call, follows the expected path (a fresh SGD made inside
# train_step forgets the buffer and is caught from the second step on). In torch.optim.SGD
# (dampening 0, no Nesterov) the buffer starts as the first gradient, then buf = momentum * buf + grad,
# and the update is p -= lr * buf.
_STEP_LR = 0.2
_STEP_MOMENTUM = 0.9


def _same(tensors_a, tensors_b, atol: float = 1e-5) -> bool:
    return all(torch.allclose(a, b, atol=atol, rtol=1e-4) for a, b in zip(tensors_a, tensors_b))


@exercise(
    "05.train_step",
    "write train_step(model, batch, optimizer) -> float: one training step on batch = (x, y) "
    "with the mean cross-entropy of the model's logits, returning the loss as a Python float. The model "
    "may arrive in evaluation mode.",
    reference=_train_step,
    # chapter 05 imports these helpers for its own training run; an answer that calls them is not the step written out
    shortcuts=("helpers.training.train_one_epoch", "helpers.training.fit"),
    goal="the training step",
    hint="This is one turn of the five-step loop of chapter 04 that the Training section describes: put "
         "the model in training mode first, since it may arrive in evaluation mode, compute the "
         "cross-entropy of the raw logits (it applies log-softmax itself), clear the old gradients before "
         "backward() because backward() adds into .grad, then step the optimizer you were given. Return "
         "the loss you computed before the update, read out as a Python float.",
)
def _test_train_step(candidate) -> None:
    g = torch.Generator().manual_seed(7)
    batches = [(torch.randn(32, 6, generator=g), torch.randint(0, 4, (32,), generator=g)) for _ in range(3)]
    torch.manual_seed(0)
    recorder = _ModeRecorder()
    model = nn.Sequential(recorder, nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    right = copy.deepcopy(model)  # follows the correct path, one step ahead of the checks
    model.eval()  # as an evaluation would have left it
    optimizer = torch.optim.SGD(model.parameters(), lr=_STEP_LR, momentum=_STEP_MOMENTUM)
    gradient_sum = None  # what .grad holds after backward() if nothing ever clears it
    buffers = None  # the momentum buffers of the correct path, after the previous step

    def stepped(before, grads):
        """The parameters after one momentum-SGD step from ``before`` with ``grads`` in ``.grad``."""
        bufs = grads if buffers is None else [_STEP_MOMENTUM * b + g_ for b, g_ in zip(buffers, grads)]
        return [p - _STEP_LR * b for p, b in zip(before, bufs)], bufs
    for step, (x, y) in enumerate(batches, start=1):
        params = list(right.parameters())
        before = [p.detach().clone() for p in params]
        logits = right(x)
        want_loss = F.cross_entropy(logits, y)
        grads = torch.autograd.grad(want_loss, params, retain_graph=True)
        probs_loss = F.cross_entropy(logits.softmax(dim=1), y)
        probs_grads = torch.autograd.grad(probs_loss, params)
        gradient_sum = list(grads) if gradient_sum is None else [s + g_ for s, g_ in zip(gradient_sum, grads)]
        want, want_buffers = stepped(before, grads)

        calls_before = len(recorder.calls)
        result = _call_keeping_grad_mode(candidate, model, (x.clone(), y.clone()), optimizer)
        calls = recorder.calls[calls_before:]
        if not calls:
            raise AssertionError("your train_step never ran the model on the batch")
        if not all(training for training, _ in calls):
            raise AssertionError(
                "the forward pass ran with the model in evaluation mode. The model arrived as an evaluation "
                "left it; dropout and batch norm must be in training mode while the model trains."
            )
        loss = _as_python_float(result, "the loss")
        where = f"at step {step}"
        if abs(loss - probs_loss.item()) < 1e-5 and abs(loss - want_loss.item()) > 1e-4:
            raise AssertionError(
                f"{where} your loss {loss:.4f} is the cross-entropy of probabilities (softmax outputs), not of "
                f"logits ({want_loss.item():.4f}). cross_entropy applies log_softmax itself: a softmax before it "
                "is applied twice, and it squashes the gradients."
            )
        if abs(loss - want_loss.item()) > 1e-4:
            raise AssertionError(
                f"{where} you returned {loss:.4f}, but the mean cross-entropy of the logits on this batch, before "
                f"the update, is {want_loss.item():.4f}"
            )
        got = [p.detach() for p in model.parameters()]
        if _same(got, before, atol=0):
            raise AssertionError(
                f"{where} the parameters did not change. The optimizer's step updates them from the gradients "
                "that backward() left in .grad: was the step called, and after backward(), with nothing "
                "clearing the gradients in between?"
            )
        if step > 1 and _same(got, stepped(before, gradient_sum)[0]):
            raise AssertionError(
                f"{where} the update used this step's gradients plus those of the previous steps: backward() "
                "adds into .grad, and nothing cleared the gradients left over from the step before."
            )
        if _same(got, stepped(before, probs_grads)[0]):
            raise AssertionError(
                f"{where} the update followed the gradient of the cross-entropy of probabilities (softmax "
                "outputs); cross_entropy takes the raw logits."
            )
        if step > 1 and _same(got, [b - _STEP_LR * g_ for b, g_ in zip(before, grads)]):
            raise AssertionError(
                f"{where} the update was a plain gradient step that ignored the optimizer's momentum: it looks "
                "like a new optimizer, made inside train_step, took the step. An optimizer keeps state between "
                "steps (momentum buffers, Adam's moment estimates); step the one you were given."
            )
        if not _same(got, want):
            gap = max((a - b).abs().max().item() for a, b in zip(got, want))
            raise AssertionError(
                f"{where} the parameters differ from one optimizer step on the mean cross-entropy of the logits "
                f"(largest difference {gap:.2e}); use the optimizer you were given, once per call."
            )
        with torch.no_grad():  # keep the reference on the same path as the candidate
            for p, w in zip(params, want):
                p.copy_(w)
        buffers = want_buffers


# --------------------------------------------------------------------------
# 05.evaluate_accuracy
# --------------------------------------------------------------------------


def _evaluate_accuracy(model: nn.Module, loader) -> float:
    """Fraction of the samples in ``loader`` that ``model`` classifies correctly.

    Args:
        model: maps inputs ``x [B, ...]`` to logits ``[B, C]``.
        loader: yields ``(x, y)`` with ``y`` int64 class indices ``[B]``; the
            last batch may be smaller.

    Returns:
        A Python float in ``[0, 1]``: correct predictions over all samples
        (not the mean of per-batch accuracies).

    Runs in evaluation mode (dropout off, batch norm on its running
    statistics) and under ``torch.no_grad()``, so no autograd graph is built.
    """
    model.eval()
    correct, seen = 0, 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum().item()
            seen += y.shape[0]
    return correct / seen


@exercise(
    "05.evaluate_accuracy",
    "write evaluate_accuracy(model, loader) -> float: the fraction of all samples in loader (batches "
    "(x, y)) that the model classifies correctly, in [0, 1], evaluated the way an evaluation must be "
    "(the model arrives in training mode).",
    reference=_evaluate_accuracy,
    shortcuts=("helpers.training.evaluate", "helpers.training.predict", "helpers.training.fit"),
    goal="the evaluation loop",
    hint="Evaluation differs from training in the two ways the Training section and pitfall 1 show: the model goes "
         "into evaluation mode (Dropout off, BatchNorm on its running statistics) and autograd stops "
         "recording. Take one predicted class per sample (an argmax over the class dimension), add up "
         "correct predictions and samples over all batches, and divide only at the end, so that the "
         "smaller last batch weighs what it holds.",
)
def _test_evaluate_accuracy(candidate) -> None:
    torch.manual_seed(1)
    recorder = _ModeRecorder()
    model = nn.Sequential(nn.Linear(6, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5), recorder, nn.Linear(32, 4))
    with torch.no_grad():  # running statistics unlike any batch's, so train and eval mode disagree
        model[1].running_mean.uniform_(-1.0, 1.0)
        model[1].running_var.uniform_(0.5, 2.0)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(50, 6, generator=g)
    # The first sample of each batch, scaled up, holds the largest logit of its batch: an argmax over the
    # whole flattened [B, C] batch then lands in row 0 (an index below C), and gives a distinct accuracy.
    x[0::16] *= 10
    judge = copy.deepcopy(model).eval()
    with torch.no_grad():
        logits = judge(x)
        predicted = logits.argmax(dim=1)
    # 50 samples in batches of 16, 16, 16 and 2: three in four right in the full batches, none in the last.
    right = torch.tensor([i < 48 and i % 4 != 0 for i in range(50)])
    y = torch.where(right, predicted, (predicted + 1) % 4)
    want = right.sum().item() / 50  # 36 / 50
    per_batch_mean = sum(right[i : i + 16].float().mean().item() for i in range(0, 50, 16)) / 4
    # predictions from an argmax with no dim: one flat index into the batch's [B, C] logits, not a class per sample
    flat_argmax = sum((logits[i : i + 16].argmax() == y[i : i + 16]).sum().item() for i in range(0, 50, 16)) / 50
    loader = DataLoader(TensorDataset(x, y), batch_size=16)

    model.train()  # as training leaves it
    result = _call_keeping_grad_mode(candidate, model, loader)
    if not recorder.calls:
        raise AssertionError("your function never ran the model")
    if any(training for training, _ in recorder.calls):
        raise AssertionError(
            "the model was in training mode while you evaluated it: dropout zeroed activations at random and "
            "batch norm normalised with each batch's own statistics (and updated its running averages). "
            "Evaluation needs the other mode."
        )
    if any(grad for _, grad in recorder.calls):
        raise AssertionError(
            "autograd was recording during the evaluation: every forward pass built a graph for a backward() "
            "that never comes, which costs memory and time. Switch gradient recording off while evaluating."
        )
    accuracy = _as_python_float(result, "the accuracy")
    if abs(accuracy - 100 * want) < 1e-6:
        raise AssertionError(f"you returned {accuracy:g}, a percentage; return a fraction in [0, 1] ({want:g} here)")
    if abs(accuracy - per_batch_mean) < 1e-6:
        # Here 36 / (4 batches x 16) is the mean of the per-batch accuracies too: batches of 20 (20, 20 and
        # 10 samples) tell the two apart (36 / 60 = 0.6 against (0.75 + 0.75 + 0.6) / 3 = 0.7).
        model.train()
        again = _as_python_float(_call_keeping_grad_mode(candidate, model, DataLoader(TensorDataset(x, y), batch_size=20)),
                                 "the accuracy")
        padded = right.sum().item() / 60
        if abs(again - padded) < 1e-6:
            raise Hint(
                f"you returned {accuracy:.4f} = {right.sum().item()} / 64, as if the loader held 4 batches x "
                f"batch_size 16 = 64 samples; but its last batch holds only 2, so there are 50 ({want:g} here). "
                f"With batches of 20 you return {again:g} = {right.sum().item()} / 60, where the loader holds "
                "20 + 20 + 10 samples. What did you divide by?",
                "len(loader) counts batches and loader.batch_size is the size of a full batch, so their product "
                "overcounts whenever the last batch is smaller; the number of samples is len(loader.dataset), or "
                "the sum of the batch sizes y.shape[0] as you go.",
            )
        raise AssertionError(
            f"you returned {accuracy:.4f}, the mean of the per-batch accuracies. The last batch holds only 2 of "
            f"the 50 samples, yet counts as much as a full one; count correct predictions over all samples "
            f"({want:g} here)."
        )
    if abs(accuracy - flat_argmax) < 1e-6 and abs(accuracy - want) > 1e-6:
        raise Hint(
            f"you returned {accuracy:g} ({want:g} expected): that is the accuracy of one prediction per batch, the "
            "position of the largest logit in the whole [B, C] batch (a single flat index in [0, B*C)), compared "
            "with every label. A prediction is one class per sample: which dimension does your argmax reduce?",
            "argmax with no dim flattens the tensor and returns one index; told the class dimension (dim of "
            "[B, C] logits), it returns one class index per row.",
        )
    assert abs(accuracy - want) < 1e-6, (
        f"{right.sum().item()} of the 50 samples are classified correctly, an accuracy of {want:g}; you returned "
        f"{accuracy:g}. Does your loop visit every batch?"
    )
