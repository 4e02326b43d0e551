"""Figures the chapters share: image grids, training curves, confusion matrices.

Figures are drawn at a modest resolution so that notebooks with stored
outputs stay small.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.rcParams.update({"figure.dpi": 72, "savefig.dpi": 72, "figure.autolayout": True})

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

__all__ = ["image_grid", "plot_confusion_matrix", "plot_history"]


def image_grid(
    images: torch.Tensor,
    titles: Sequence[str] | None = None,
    ncols: int = 8,
    cmap: str = "gray",
    suptitle: str | None = None,
    cell_inches: float = 1.2,
):
    """Show images in a grid and return the figure.

    Args:
        images: ``[N, H, W]`` or ``[N, C, H, W]`` (C = 1 or 3), any float or
            uint8 dtype; each image is min-max scaled for display.
        titles: optional ``N`` captions.
        ncols: images per row.

    Raises:
        ValueError: unsupported shape or a titles/images length mismatch.
    """
    images = images.detach().cpu()
    if images.ndim == 4 and images.shape[1] in (1, 3):
        images = images.permute(0, 2, 3, 1)
        if images.shape[-1] == 1:
            images = images[..., 0]
    elif images.ndim != 3:
        raise ValueError(f"expected [N, H, W] or [N, C, H, W], got {tuple(images.shape)}")
    n = images.shape[0]
    if titles is not None and len(titles) != n:
        raise ValueError(f"{len(titles)} titles for {n} images")
    nrows = max(1, -(-n // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(ncols * cell_inches, nrows * cell_inches * 1.1), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i >= n:
            continue
        img = images[i].float()
        img = (img - img.min()) / (img.max() - img.min()).clamp_min(1e-8)
        ax.imshow(img.numpy(), cmap=cmap if img.ndim == 2 else None)
        if titles is not None:
            ax.set_title(titles[i], fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def plot_history(history, title: str = "training curves", val_label: str = "validation"):
    """Loss and accuracy per epoch from :class:`helpers.training.History`; returns the figure.

    ``val_label`` names the held-out curve ("validation", or "test" when the
    loader passed to ``fit`` was the test set).
    """
    epochs = range(1, len(history.train_loss) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.2))
    ax_loss.plot(epochs, history.train_loss, "o-", label="train")
    ax_acc.plot(epochs, [100 * a for a in history.train_acc], "o-", label="train")
    if history.val_loss:
        ax_loss.plot(epochs, history.val_loss, "s-", label=val_label)
        ax_acc.plot(epochs, [100 * a for a in history.val_acc], "s-", label=val_label)
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy per sample", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    return fig


def plot_confusion_matrix(cm: torch.Tensor, class_names: Sequence[str], title: str = "confusion matrix"):
    """Heatmap of ``cm[true, predicted]`` counts with the numbers written in; returns the figure.

    Raises:
        ValueError: ``cm`` is not square or does not match ``class_names``.
    """
    k = len(class_names)
    if tuple(cm.shape) != (k, k):
        raise ValueError(f"cm has shape {tuple(cm.shape)} but there are {k} class names")
    cm = cm.cpu()
    fig, ax = plt.subplots(figsize=(0.55 * k + 2, 0.55 * k + 1.5))
    # log scale so that the few mistakes are visible next to the large diagonal
    ax.imshow(torch.log1p(cm.float()).numpy(), cmap="Blues")
    ax.set_xticks(range(k), class_names, rotation=45, ha="right")
    ax.set_yticks(range(k), class_names)
    ax.set(xlabel="predicted", ylabel="true", title=title)
    top = cm.max().item()
    for i in range(k):
        for j in range(k):
            value = cm[i, j].item()
            if value:
                color = "white" if value > top / 4 else "black"
                ax.text(j, i, str(value), ha="center", va="center", fontsize=7, color=color)
    return fig
