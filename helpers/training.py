"""The reusable training and evaluation loops (written out in chapters 04 and 05).

Every function works for any classifier whose ``forward`` maps a batch
``x`` to logits ``[B, C]`` and whose loader yields ``(x, y)`` with ``y`` int64
class indices ``[B]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from .bars import bar

__all__ = ["History", "accuracy", "confusion_matrix", "evaluate", "fit", "predict", "train_one_epoch"]


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of rows whose arg-max equals the target.

    Args:
        logits: float ``[B, C]``.
        targets: int64 ``[B]`` class indices.

    Returns:
        A Python float in ``[0, 1]``.

    Raises:
        ValueError: shapes do not line up.
    """
    if logits.ndim != 2 or targets.ndim != 1 or logits.shape[0] != targets.shape[0]:
        raise ValueError(f"expected logits [B, C] and targets [B], got {tuple(logits.shape)} and {tuple(targets.shape)}")
    return (logits.argmax(dim=1) == targets).float().mean().item()


def train_one_epoch(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable = nn.functional.cross_entropy,
    device: torch.device | str = "cpu",
) -> tuple[float, float]:
    """One pass over ``loader`` with the five-step loop (forward, loss, zero_grad, backward, step).

    Returns:
        ``(mean loss per sample, accuracy)`` over the epoch, as floats.

    Raises:
        ValueError: the loader yielded no batches.
    """
    model.train()
    total_loss, correct, seen = 0.0, 0, 0
    for x, y in bar(loader, desc="train", unit="batch"):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(x)
        loss = loss_fn(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * y.shape[0]
        correct += (logits.argmax(dim=1) == y).sum().item()
        seen += y.shape[0]
    if seen == 0:
        raise ValueError("the training loader yielded no batches (is the dataset empty?)")
    return total_loss / seen, correct / seen


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable,
    loss_fn: Callable = nn.functional.cross_entropy,
    device: torch.device | str = "cpu",
) -> tuple[float, float]:
    """Mean loss per sample and accuracy over ``loader``, in ``eval()`` mode without gradients.

    ``loss_fn`` may be a function or a module (``nn.CrossEntropyLoss()``); it
    must return the batch mean (the default reduction).

    Raises:
        ValueError: the loader yielded no batches.
    """
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    for x, y in bar(loader, desc="evaluate", unit="batch"):
        x, y = x.to(device), y.to(device)
        logits = model(x)
        total_loss += loss_fn(logits, y).item() * y.shape[0]  # loss_fn returns a batch mean
        correct += (logits.argmax(dim=1) == y).sum().item()
        seen += y.shape[0]
    if seen == 0:
        raise ValueError("the evaluation loader yielded no batches (is the dataset empty?)")
    return total_loss / seen, correct / seen


@torch.no_grad()
def predict(model: nn.Module, loader: Iterable, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted and true classes for every sample of ``loader``.

    Returns:
        ``(preds, targets)``: two int64 CPU tensors ``[N]``.
    """
    model.eval()
    preds, targets = [], []
    for x, y in loader:
        preds.append(model(x.to(device)).argmax(dim=1).cpu())
        targets.append(y.cpu())
    if not preds:
        raise ValueError("the loader yielded no batches (is the dataset empty?)")
    return torch.cat(preds), torch.cat(targets)


def confusion_matrix(preds: torch.Tensor, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Counts ``cm[true, predicted]`` as an int64 tensor ``[num_classes, num_classes]``.

    Raises:
        ValueError: a label is outside ``[0, num_classes)`` or the shapes differ.
    """
    if preds.shape != targets.shape:
        raise ValueError(f"preds {tuple(preds.shape)} and targets {tuple(targets.shape)} differ in shape")
    for t in (preds, targets):
        if t.numel() and (t.min() < 0 or t.max() >= num_classes):
            raise ValueError(f"labels must lie in [0, {num_classes}), got range [{t.min()}, {t.max()}]")
    flat = targets.long() * num_classes + preds.long()
    return torch.bincount(flat, minlength=num_classes**2).reshape(num_classes, num_classes)


@dataclass
class History:
    """Per-epoch curves from :func:`fit` (losses per sample, accuracies in [0, 1], seconds).

    ``lr`` is the learning rate of the first parameter group during each epoch.
    """

    train_loss: list[float] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_acc: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)


def fit(
    model: nn.Module,
    train_loader: Iterable,
    val_loader: Iterable | None,
    optimizer: torch.optim.Optimizer,
    *,
    epochs: int,
    loss_fn: Callable = nn.functional.cross_entropy,
    device: torch.device | str = "cpu",
    scheduler=None,
    log: Callable[[str], None] | None = print,
) -> History:
    """Train for ``epochs`` epochs, evaluating on ``val_loader`` after each.

    ``scheduler`` (optional) is stepped once per epoch, after the optimizer;
    a ``ReduceLROnPlateau`` is stepped with the validation loss.
    ``log`` receives one line per epoch (``None`` for silence).

    Raises:
        ValueError: ``epochs`` < 1, or a loader is empty.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    model.to(device)
    history = History()
    for epoch in bar(range(1, epochs + 1), desc="epochs", unit="epoch"):
        start = time.perf_counter()
        history.lr.append(optimizer.param_groups[0]["lr"])
        tl, ta = train_one_epoch(model, train_loader, optimizer, loss_fn, device)
        history.train_loss.append(tl)
        history.train_acc.append(ta)
        line = f"epoch {epoch}/{epochs}  lr {history.lr[-1]:.1e}  train loss {tl:.4f} acc {ta:.2%}"
        if val_loader is not None:
            vl, va = evaluate(model, val_loader, loss_fn, device)
            history.val_loss.append(vl)
            history.val_acc.append(va)
            line += f"  |  val loss {vl:.4f} acc {va:.2%}"
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            if val_loader is None:
                raise ValueError("ReduceLROnPlateau needs a val_loader: it steps on the validation loss")
            scheduler.step(history.val_loss[-1])
        elif scheduler is not None:
            scheduler.step()
        history.seconds.append(time.perf_counter() - start)
        if log is not None:
            log(f"{line}  ({history.seconds[-1]:.1f} s)")
    return history
