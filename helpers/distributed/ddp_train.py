"""Entry point: train the MNIST MLP with DistributedDataParallel and a DistributedSampler.

Run with ``torchrun("helpers.distributed.ddp_train", "--out", folder, "--epochs", "2")``.
Each rank sees its own 1/W of the (shuffled) training images per epoch, with
``sampler.set_epoch(epoch)`` so the shuffle changes every epoch. Rank 0 evaluates
on the 10,000 test images at the end. Rank 0 writes ``<out>/ddp_train.json``:

- ``accuracy``: test accuracy of the trained model (rank 0);
- ``epoch_loss``: mean training loss per epoch, averaged over all ranks (all_reduce);
- ``first_indices``: ``{rank: [[first indices of epoch 0], [epoch 1], ...]}`` with ``set_epoch``;
- ``first_indices_without_set_epoch``: the same for a sampler whose ``set_epoch`` is never called;
- ``overlap``: how many indices two ranks share in epoch 0 (0: each sample goes to one rank);
- ``replica_max_diff``: the largest difference of any parameter between rank 0 and the others (0: in sync);
- ``samples_per_rank``, ``steps_per_epoch``, ``world_size``, ``seconds``;
- ``download_race``: a fake, slow, non-atomic "download" of one file into ``<out>/download``,
  done twice: ``naive`` (every rank: "if the file is missing, download it") and
  ``rank_zero_first`` (rank 0 downloads, the others wait at a barrier). In the naive case the
  race is forced, so that it goes wrong on every run rather than by chance: the other ranks
  wait (a barrier) until rank 0 has written its first chunk, look at the file, and only then
  let rank 0 (a second barrier) write the rest. For each case:
  ``{"downloaded_by": [ranks that downloaded], "incomplete_on": [ranks that then read an
  incomplete file]}``; the naive case always gives ``[0]`` and ``[1, ..., W - 1]``;
- ``spawned``: before joining the process group, each rank launches ``--spawn`` children with
  ``torch.multiprocessing.start_processes`` (what an ``mp.spawn`` script does); each child writes
  its pid, parent pid, spawn index and the ``RANK`` and ``MASTER_PORT`` it inherited. ``{"children": [...],
  "torchrun_ranks": [pids], "master_port": the ranks' MASTER_PORT}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from ..data import mnist
from ..models import MLP
from .common import Context, gather_object, process_group, run_main, write_json

MEAN, STD = 0.1307, 0.3081  # MNIST pixel statistics
CHUNKS, CHUNK_BYTES, CHUNK_PAUSE = 8, 1 << 16, 0.06  # the fake download: 8 x 64 KiB, 0.06 s apart (about 0.5 s)


@contextlib.contextmanager
def rank_zero_first(ctx: Context):
    """Run the ``with`` block on rank 0 first; the other ranks wait at a barrier, then run it.

    The pattern for anything that writes a shared file once (a dataset download, a
    cache): rank 0 does the work, and the others find it complete. Every rank must
    enter the block (a barrier is a collective).
    """
    if not ctx.is_main:
        dist.barrier()  # wait until rank 0 has run the block
    yield
    if ctx.is_main:
        dist.barrier()  # release the others


def fake_download(path: Path, after_first_chunk: Callable[[], None] | None = None) -> None:
    """A slow download that writes straight into ``path`` (not atomically), chunk by chunk.

    ``after_first_chunk``, if given, is called once the first chunk is on disk (the naive race
    uses it to hold rank 0 there while the other ranks look at the file).
    """
    with open(path, "wb") as f:
        for i in range(CHUNKS):
            f.write(bytes([i]) * CHUNK_BYTES)
            f.flush()
            if i == 0 and after_first_chunk is not None:
                after_first_chunk()
            time.sleep(CHUNK_PAUSE)


def is_complete(path: Path) -> bool:
    return path.read_bytes() == b"".join(bytes([i]) * CHUNK_BYTES for i in range(CHUNKS))


def get_file(path: Path, after_first_chunk: Callable[[], None] | None = None) -> bool:
    """The usual "download unless it is there"; True if this call downloaded."""
    if path.exists():
        return False
    fake_download(path, after_first_chunk)
    return True


def download_race(ctx: Context, folder: Path) -> dict:
    """The naive pattern and rank_zero_first, each on a fresh file; what every rank did and read."""
    folder.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in ("naive", "rank_zero_first"):
        path = folder / f"{name}.bin"
        dist.barrier()  # the ranks start together
        if name == "naive":
            # Forced interleaving (two barriers): rank 0 writes one chunk and waits; the others then run
            # the naive "download unless it is there" on a file that exists but is incomplete, read it,
            # and only then let rank 0 finish. Without the barriers this happens only by chance.
            if ctx.is_main:
                downloaded = get_file(path, after_first_chunk=lambda: (dist.barrier(), dist.barrier()))
                complete = is_complete(path)
            else:
                dist.barrier()  # rank 0 has written its first chunk
                downloaded = get_file(path)
                complete = is_complete(path)  # what this rank would now load
                dist.barrier()  # let rank 0 write the rest
        else:
            with rank_zero_first(ctx):
                downloaded = get_file(path)
            complete = is_complete(path)  # what this rank would now load
        seen = gather_object((downloaded, complete))
        results[name] = {
            "downloaded_by": [r for r, (d, _) in enumerate(seen) if d],
            "incomplete_on": [r for r, (_, c) in enumerate(seen) if not c],
        }
    return results


def spawned_child(index: int, folder: str) -> None:
    """What each process started by ``mp.spawn``/``start_processes`` records about itself."""
    me = {"pid": os.getpid(), "parent": os.getppid(), "index": index, "inherited_RANK": os.environ.get("RANK"),
          "inherited_MASTER_PORT": os.environ.get("MASTER_PORT")}
    Path(folder, f"child_{os.getpid()}.json").write_text(json.dumps(me))


def as_tensors(train: bool, limit: int | None = None) -> TensorDataset:
    ds = mnist(train=train)
    x, y = ds.data, ds.targets
    if limit is not None:
        x, y = x[:limit], y[:limit]
    return TensorDataset(((x.float() / 255) - MEAN) / STD, y)


def first_indices(sampler: DistributedSampler, epochs: int, k: int, set_epoch: bool) -> list[list[int]]:
    heads = []
    for epoch in range(epochs):
        if set_epoch:
            sampler.set_epoch(epoch)
        heads.append(list(sampler)[:k])
    return heads


@record
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-size", type=int, default=20_000, help="first N training images (60,000 max)")
    parser.add_argument("--batch", type=int, default=64, help="batch size per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spawn", type=int, default=2, help="children each rank starts like an mp.spawn script (0: none)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    spawn_dir = args.out / "spawned"
    if args.spawn:
        # an mp.spawn script run under torchrun: every rank starts --spawn more processes. mp.spawn itself
        # uses start_method="spawn" (a fresh interpreter each); "fork" gives the same count without the imports.
        spawn_dir.mkdir(parents=True, exist_ok=True)
        mp.start_processes(spawned_child, args=(str(spawn_dir),), nprocs=args.spawn, start_method="fork")
    with process_group() as ctx:
        race = download_race(ctx, args.out / "download")
        torchrun_pids = gather_object(os.getpid())
        with rank_zero_first(ctx):  # rank 0 copies MNIST from the mirror (or downloads it) first, if it has to
            train_ds = as_tensors(True, args.train_size)
            test_ds = as_tensors(False) if ctx.is_main else None

        sampler = DistributedSampler(train_ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=args.seed)
        loader = DataLoader(train_ds, batch_size=args.batch, sampler=sampler)  # no shuffle=: the sampler shuffles
        torch.manual_seed(args.seed)
        model = MLP(hidden=(args.hidden,), dropout=0.0).to(ctx.device)
        ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()

        epoch_loss = []
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
            total = torch.zeros(2, device=ctx.device)
            for x, y in loader:
                x, y = x.to(ctx.device), y.to(ctx.device)
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(ddp(x), y)
                loss.backward()
                opt.step()
                total += torch.stack([loss.detach() * len(y), torch.tensor(float(len(y)), device=ctx.device)])
            dist.all_reduce(total)  # sum of losses and of samples over all ranks
            epoch_loss.append((total[0] / total[1]).item())
            print(f"epoch {epoch}: {len(loader)} steps of {args.batch} on this rank, mean loss over all ranks {epoch_loss[-1]:.4f}", flush=True)

        # are the replicas still identical? (DDP's averaged gradients keep them so)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        copies = [torch.empty_like(flat) for _ in range(ctx.world_size)]
        dist.all_gather(copies, flat)
        replica_max_diff = max((c - copies[0]).abs().max().item() for c in copies)

        # which samples did each rank see first? (with set_epoch, and with a sampler that never gets it)
        heads = first_indices(sampler, args.epochs, 8, set_epoch=True)
        frozen = DistributedSampler(train_ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=args.seed)
        heads_frozen = first_indices(frozen, args.epochs, 8, set_epoch=False)
        sampler.set_epoch(0)
        mine = set(sampler)
        gathered: list[object] = [None] * ctx.world_size
        dist.all_gather_object(gathered, {"heads": heads, "frozen": heads_frozen, "epoch0": sorted(mine)})

        if ctx.is_main:
            model.eval()
            with torch.no_grad():
                logits = model(test_ds.tensors[0].to(ctx.device))
                accuracy = (logits.argmax(1).cpu() == test_ds.tensors[1]).float().mean().item()
            print(f"test accuracy (rank 0, {len(test_ds)} images): {accuracy:.4f}", flush=True)
            sets = [set(g["epoch0"]) for g in gathered]
            write_json(
                args.out / "ddp_train.json",
                {
                    "accuracy": accuracy,
                    "epoch_loss": epoch_loss,
                    "first_indices": {str(r): g["heads"] for r, g in enumerate(gathered)},
                    "first_indices_without_set_epoch": {str(r): g["frozen"] for r, g in enumerate(gathered)},
                    "overlap": len(set.intersection(*sets)) if len(sets) > 1 else 0,
                    "covered": len(set.union(*sets)),
                    "replica_max_diff": replica_max_diff,
                    "samples_per_rank": len(sampler),
                    "steps_per_epoch": len(loader),
                    "train_size": len(train_ds),
                    "world_size": ctx.world_size,
                    "batch_per_rank": args.batch,
                    "seconds": time.perf_counter() - start,
                    "download_race": race,
                    "spawned": {
                        "children": [json.loads(p.read_text()) for p in sorted(spawn_dir.glob("child_*.json"))],
                        "torchrun_ranks": torchrun_pids,
                        "master_port": os.environ.get("MASTER_PORT"),
                    },
                },
                ctx,
            )


if __name__ == "__main__":
    run_main(main)
