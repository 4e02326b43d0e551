"""helpers.training and helpers.models on tiny data."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.models import MLP, count_parameters
from helpers.training import accuracy, confusion_matrix, evaluate, fit, predict


def blobs(n: int = 400, seed: int = 0):
    """Three well-separated Gaussian blobs in 2-D."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.tensor([[0.0, 4.0], [4.0, -2.0], [-4.0, -2.0]])
    y = torch.randint(0, 3, (n,), generator=g)
    x = centers[y] + 0.5 * torch.randn(n, 2, generator=g)
    return TensorDataset(x, y)


def test_fit_learns_separable_data():
    torch.manual_seed(0)
    train = DataLoader(blobs(400, 0), batch_size=32, shuffle=True)
    test = DataLoader(blobs(200, 1), batch_size=64)
    model = MLP(in_features=2, hidden=(16,), num_classes=3, dropout=0.0)
    before = evaluate(model, test)[1]
    history = fit(model, train, test, torch.optim.Adam(model.parameters(), lr=0.05), epochs=5, log=None)
    assert len(history.train_loss) == len(history.val_acc) == len(history.seconds) == 5
    assert history.train_loss[-1] < history.train_loss[0]
    assert history.val_acc[-1] > 0.97 > before
    preds, targets = predict(model, test)
    assert preds.shape == targets.shape == (200,) and preds.dtype == torch.int64
    assert (preds == targets).float().mean().item() == pytest.approx(history.val_acc[-1])


def test_fit_calls_scheduler_once_per_epoch_and_records_lr():
    model = MLP(in_features=2, hidden=(4,), num_classes=3)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    lines = []
    history = fit(model, DataLoader(blobs(32), batch_size=16), None, opt, epochs=3, scheduler=sched, log=lines.append)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.125)
    assert history.lr == pytest.approx([1.0, 0.5, 0.25])
    assert "lr 5.0e-01" in lines[1]


def test_evaluate_accepts_a_loss_module_and_weights_batches_by_size():
    model = MLP(in_features=2, hidden=(4,), num_classes=3)
    ds = blobs(50)
    uneven = DataLoader(ds, batch_size=16)  # batches of 16, 16, 16 and 2
    whole = DataLoader(ds, batch_size=50)
    loss_mod, acc_mod = evaluate(model, uneven, loss_fn=torch.nn.CrossEntropyLoss())
    loss_fn, acc_fn = evaluate(model, whole)
    assert loss_mod == pytest.approx(loss_fn, rel=1e-5) and acc_mod == acc_fn


def test_fit_rejects_zero_epochs_and_empty_loaders():
    model = MLP(in_features=2, hidden=(4,), num_classes=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="epochs"):
        fit(model, [], None, opt, epochs=0)
    with pytest.raises(ValueError, match="no batches"):
        fit(model, [], None, opt, epochs=1, log=None)


def test_accuracy_and_its_shape_check():
    logits = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0]])
    assert accuracy(logits, torch.tensor([0, 1, 1])) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match=r"\[B, C\]"):
        accuracy(logits, torch.tensor([[0, 1, 1]]))


def test_confusion_matrix_counts_true_by_predicted():
    preds = torch.tensor([0, 1, 1, 2, 2, 2])
    targets = torch.tensor([0, 1, 2, 2, 2, 0])
    cm = confusion_matrix(preds, targets, 3)
    assert cm.tolist() == [[1, 0, 1], [0, 1, 0], [0, 1, 2]]
    assert cm.sum().item() == 6
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        confusion_matrix(torch.tensor([3]), torch.tensor([0]), 3)


def test_mlp_shapes_and_parameter_count():
    model = MLP(784, (512, 256), 10, dropout=0.2)
    assert model(torch.zeros(5, 1, 28, 28)).shape == (5, 10)
    assert count_parameters(model) == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
    model.net[1].weight.requires_grad_(False)
    assert count_parameters(model, trainable_only=True) == count_parameters(model) - 784 * 512
    with pytest.raises(ValueError, match="dropout"):
        MLP(dropout=1.0)
    with pytest.raises(ValueError, match="positive"):
        MLP(hidden=(0,))


def test_fit_steps_reduce_lr_on_plateau_with_the_validation_loss():
    model = MLP(in_features=2, hidden=(4,), num_classes=3)
    # the optimizer holds a dummy parameter, so the model (and its loss) never changes
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    loader = DataLoader(blobs(32), batch_size=16)
    fit(model, loader, loader, opt, epochs=3, scheduler=sched, log=None)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="val_loader"):
        fit(model, loader, None, opt, epochs=1, scheduler=sched, log=None)


def test_predict_on_an_empty_loader_is_a_clear_error():
    with pytest.raises(ValueError, match="no batches"):
        predict(MLP(in_features=2, hidden=(4,), num_classes=3), [])
