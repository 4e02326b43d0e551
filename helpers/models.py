"""Models shared between chapters (each is first written out in the chapter that teaches it)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["MLP", "count_parameters"]


class MLP(nn.Module):
    """A multi-layer perceptron for flattened images (chapter 05).

    ``Flatten -> [Linear -> ReLU -> Dropout] * len(hidden) -> Linear``.

    Args:
        in_features: inputs per sample after flattening (784 for 28x28 MNIST).
        hidden: widths of the hidden layers.
        num_classes: outputs (logits) per sample.
        dropout: drop probability after each hidden ReLU (0 disables it).

    Shapes:
        input ``[B, *]`` with ``prod(*) == in_features`` (e.g. ``[B, 1, 28, 28]``),
        output float logits ``[B, num_classes]``.

    Raises:
        ValueError: a size is not positive or ``dropout`` is outside [0, 1).
    """

    def __init__(
        self,
        in_features: int = 784,
        hidden: Sequence[int] = (512, 256),
        num_classes: int = 10,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        sizes = [in_features, *hidden, num_classes]
        if any(s <= 0 for s in sizes):
            raise ValueError(f"layer sizes must be positive, got {sizes}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        layers: list[nn.Module] = [nn.Flatten()]
        for fan_in, fan_out in zip(sizes[:-2], sizes[1:-1]):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(sizes[-2], sizes[-1]))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters (elements, not tensors) of ``model``.

    Buffers such as BatchNorm's running statistics are not parameters and are
    excluded. A parameter shared by two layers (tied weights) is counted once,
    because ``model.parameters()`` yields each tensor once.

    Args:
        model: any ``nn.Module``.
        trainable_only: count only parameters with ``requires_grad=True``.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
