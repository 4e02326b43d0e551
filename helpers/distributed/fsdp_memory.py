"""Chapter 26: FSDP2 (``fully_shard``) against DDP and a single process, then a DCP checkpoint.

Run under torchrun (the chapter uses 2 processes)::

    python -m torch.distributed.run --nproc-per-node 2 -m helpers.distributed.fsdp_memory \
        --data build/x/batch.pt --out build/x --steps 3 --checkpoint build/x/ckpt

``--data`` is a ``torch.save``'d dict ``{"x": float [N, 784], "y": int64 [N]}``
(N divisible by the world size); rank r trains on the r-th contiguous block
of N / world rows, so the mean of the ranks' mean losses is the whole batch's
mean loss.

Every rank builds the same ``helpers.models.MLP(784, (256, 128), 10,
dropout=0)`` (same seed) and trains copies of it for ``--steps`` steps.

With AdamW (``--lr``), four ways:

- ``reference``: one process, the whole batch (what the others must match);
- ``ddp``: ``DistributedDataParallel``, a full replica per rank;
- ``fsdp_fp32``: ``fully_shard`` on each ``Linear`` and on the root, float32;
- ``fsdp_bf16``: the same with ``MixedPrecisionPolicy(param_dtype=bfloat16,
  reduce_dtype=float32)``;
- ``fsdp_sum_adamw``: ``fsdp_fp32`` with gradients summed over the ranks
  instead of averaged (a deliberate bug that Adam mostly hides);
- ``fsdp_sum_adamw_small_eps``: the same sum, and its own one-process
  reference, with AdamW's ``eps`` set to ``--small-eps`` (1e-12), where the
  sum no longer moves any weight by more than ``--tol``.

With plain SGD (``--sgd-lr``, no momentum; under ``"sgd"``): ``reference``,
``ddp``, ``fsdp``, ``fsdp_keep`` (``reshard_after_forward=False``),
``fsdp_root_only`` (``fully_shard`` on the root only) and two negative
controls, ``fsdp_sum`` (sum instead of mean) and ``no_allreduce`` (each rank
alone). Each records the largest difference of its first gradients and final
parameters from the reference, the gradient scale, the fraction of parameter
elements off by more than ``--tol``, and the full-size bytes (unsharded
parameters, their gradients, FSDP's communication buffers) measured by
:class:`UnshardedBytes` during the first step's forward and backward.

Rank 0 writes ``fsdp.json``: the layers' unsharded bytes (``layer_bytes``,
and ``padded_layer_bytes`` with FSDP's padding of dim 0 to a multiple of the
world size); for the AdamW runs, per-rank bytes of
parameters, gradients and AdamW state (the local shards added up), the
losses of every step, each run's largest parameter difference from the
reference and the placements of the sharded parameters; the SGD runs as
above. With ``--checkpoint DIR`` the float32 FSDP model and its
optimizer are saved with ``torch.distributed.checkpoint.save`` (sharded: each
rank writes its own shards), and rank 0 also writes the full tensors to
``full_state.pt`` (``{"model": {...}, "optim": {...}}``) to compare a reload with.
"""

from __future__ import annotations

import argparse
import copy
import weakref
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from helpers.distributed.common import (
    gather_object,
    process_group,
    run_main,
    save_rank0,
    write_json,
)
from helpers.models import MLP


def _local(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank stores: the local shard of a DTensor, else ``t`` itself."""
    return t.to_local() if isinstance(t, DTensor) else t


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _nbytes(tensors) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors)


def padded_nbytes(p: torch.Tensor, world: int) -> int:
    """Bytes of ``p`` unsharded as FSDP2 allocates it: dim 0 padded up to ``ceil(dim0 / world) * world`` rows.

    FSDP2 pads every shard to ``ceil(dim0 / world)`` rows, so the all-gather output and the
    unsharded parameter it views have that many rows per rank; for dim 0 divisible by the
    world size this is ``p.nbytes``. A 0-d tensor counts as one row.
    """
    rows = p.shape[0] if p.dim() else 1
    return -(-rows // world) * world * (p.numel() // max(rows, 1)) * p.element_size()


def memory_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds for parameters, gradients and optimizer state (local shards only).

    This adds up ``numel * element_size`` of the local pieces: it is the layout
    FSDP promises, not a measurement of memory. :class:`UnshardedBytes` measures.
    """
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {
        "params": _nbytes(params),
        "grads": _nbytes(p.grad for p in params if p.grad is not None),
        "optim_state": _nbytes(state),
    }


class UnshardedBytes:
    """Measure the full-size (unsharded) bytes alive on this rank during forward *and* backward.

    Three kinds of storage are counted, each over distinct, non-empty storages:

    - ``params``: the plain (non-DTensor) parameter tensors. While an FSDP unit
      is gathered, FSDP registers plain full-size tensors as its parameters
      (DTensor shards otherwise), and frees them by resizing their storage to
      0 bytes, so freed memory counts 0. For a plain model (one process, DDP)
      every parameter is full-size, always.
    - ``grads``: the ``.grad`` of those plain parameters: FSDP's unsharded
      gradients between autograd accumulating them and the unit's
      reduce-scatter (for a plain model, its gradients).
    - ``buffers``: FSDP's communication buffers, read from FSDP2's *private*
      state (``FSDPState._fsdp_param_groups``, ``_comm_ctx``; torch 2.14): the
      flat all-gather outputs not yet copied out or not yet freed (a prefetched
      unit's, or in forward the previous unit's, which FSDP frees only after the
      next unit's copy-out), and the reduce-scatter inputs still held. DDP's
      gradient buckets are not seen (DDP keeps them in C++).

    Sampling points: a forward pre-hook and a forward hook on every module that
    owns parameters, registered *after* ``fully_shard`` so that they run after
    FSDP's own (``"pre <module>"``, ``"post <module>"``); a hook on each such
    module's output gradient, which runs after FSDP's pre-backward hook has
    gathered the unit and prefetched the next (``"backward <module>"``); and a
    post-accumulate-grad hook on every plain parameter (``"grad <parameter>"``),
    which runs when autograd has written that gradient, before FSDP's
    post-backward reduce-scatters it. :meth:`sample` adds points by hand.
    Activations are not counted.

    ``samples`` is a list of ``(label, params, grads, buffers)`` in bytes.
    ``sharded_bytes`` is measured once, when the tracker is made (before any
    forward, so every FSDP parameter is a DTensor then): the distinct storages
    behind the local pieces, FSDP's (padded) shards, which stay allocated for
    the whole run.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.refs: list[weakref.ref] = []
        self.samples: list[tuple[str, int, int, int]] = []
        self.handles = []
        self.sharded_bytes = self.sharded()
        self.fsdp_states = [m._get_fsdp_state() for m in model.modules() if isinstance(m, FSDPModule)]
        for name, module in model.named_modules():
            if next(module.parameters(recurse=False), None) is not None:
                self.handles.append(module.register_forward_pre_hook(self._hook(f"pre {name}")))
                self.handles.append(module.register_forward_hook(self._post_forward(name)))

    def _hook(self, label: str):
        def hook(*_):
            self.sample(label)
        return hook

    def _post_forward(self, name: str):
        def hook(module, args, output):
            self.sample(f"post {name}")
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(self._hook(f"backward {name}"))  # after FSDP's own hook on this tensor
        return hook

    def _plain_params(self) -> list[torch.Tensor]:
        """The plain parameter tensors seen so far (alive), remembering new ones and hooking their gradients."""
        for name, p in self.model.named_parameters():
            if not isinstance(p, DTensor) and not any(r() is p for r in self.refs):
                self.refs.append(weakref.ref(p))
                if p.requires_grad:
                    self.handles.append(p.register_post_accumulate_grad_hook(self._hook(f"grad {name}")))
        return [t for t in (r() for r in self.refs) if t is not None]

    @staticmethod
    def _storage_bytes(tensors) -> int:
        storages = {}
        for t in tensors:
            if t is not None and t.untyped_storage().nbytes() > 0:
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return sum(storages.values())

    def live(self) -> int:
        """Bytes of distinct, non-empty storages behind the unsharded parameters seen so far."""
        return self._storage_bytes(self._plain_params())

    def grad_bytes(self) -> int:
        """Bytes of the gradients of those unsharded parameters."""
        return self._storage_bytes(p.grad for p in self._plain_params())

    def buffer_bytes(self) -> int:
        """Bytes of FSDP's all-gather outputs and reduce-scatter inputs alive now (read from private FSDP state)."""
        buffers = []
        for state in self.fsdp_states:
            for group in state._fsdp_param_groups:
                if group._all_gather_result is not None:
                    buffers.append(group._all_gather_result.all_gather_output)
            ctx = state._comm_ctx
            if ctx.all_gather_state is not None:
                buffers.append(ctx.all_gather_state.all_gather_result.all_gather_output)
            buffers.extend(s.reduce_scatter_input for s in ctx.reduce_scatter_states)
        return self._storage_bytes(buffers)

    def sharded(self) -> int:
        """Bytes of distinct storages behind the local pieces of the model's DTensor parameters."""
        return self._storage_bytes(p.to_local() for p in self.model.parameters() if isinstance(p, DTensor))

    def sample(self, label: str) -> int:
        """Record ``(label, params, grads, buffers)`` and return the unsharded parameter bytes."""
        value = self.live()
        self.samples.append((label, value, self.grad_bytes(), self.buffer_bytes()))
        return value

    def remove(self) -> None:
        """Remove the hooks."""
        for h in self.handles:
            h.remove()


def train(model, batch_x, batch_y, steps, make_optimizer, reduce_losses: bool, tracker: UnshardedBytes | None = None):
    """Optimizer steps on one batch.

    Returns ``(losses, optimizer, first_grads)``: the loss of each step
    (averaged over the ranks when ``reduce_losses``), the optimizer, and the
    full gradient of every parameter after the first ``backward()`` (gathered
    from the shards for FSDP), taken before the first optimizer step. With a
    ``tracker``, the unsharded bytes are also sampled between the first
    forward and its backward (``"between forward and backward"``) and after that backward.
    """
    optimizer = make_optimizer(model.parameters())
    losses, first_grads = [], None
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        out = model(batch_x)
        if tracker is not None and step == 0:
            tracker.sample("between forward and backward")
        loss = F.cross_entropy(out.float(), batch_y)
        loss.backward()
        if tracker is not None and step == 0:
            tracker.sample("after backward")
        if step == 0:
            first_grads = [_full(p.grad).detach().float().clone() for p in model.parameters()]
        optimizer.step()
        value = loss.detach().clone()
        if reduce_losses:
            dist.all_reduce(value, op=dist.ReduceOp.AVG if dist.get_backend() == "nccl" else dist.ReduceOp.SUM)
            if dist.get_backend() != "nccl":
                value /= dist.get_world_size()
        losses.append(round(value.item(), 6))
    return losses, optimizer, first_grads


def max_diff(model: nn.Module, reference: nn.Module) -> float:
    """Largest absolute difference between ``model``'s full parameters and the reference's."""
    return max((_full(p).detach().float() - q.detach()).abs().max().item() for p, q in zip(model.parameters(), reference.parameters()))


def grad_diff(grads: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """Largest absolute difference between two lists of full gradients."""
    return max((g - r).abs().max().item() for g, r in zip(grads, reference))


def fraction_over(model: nn.Module, reference: nn.Module, tol: float) -> float:
    """The fraction of all parameter elements whose full value differs from the reference's by more than ``tol``."""
    over = total = 0
    for p, q in zip(model.parameters(), reference.parameters()):
        d = (_full(p).detach().float() - q.detach()).abs()
        over, total = over + int((d > tol).sum()), total + d.numel()
    return over / total


def grad_scale(grads: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """The least-squares factor s in ``grads ~ s * reference`` over all elements: 1 when equal, world size for a sum."""
    dot = sum((g * r).sum() for g, r in zip(grads, reference))
    return (dot / sum((r * r).sum() for r in reference)).item()


def shard_mlp(model: nn.Module, per_layer: bool = True, **kwargs) -> nn.Module:
    """``fully_shard`` each ``Linear`` (when ``per_layer``), then the root, with the same keyword arguments."""
    if per_layer:
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                fully_shard(layer, **kwargs)  # each Linear: one all-gather unit
    fully_shard(model, **kwargs)  # the root: whatever is left, and the last reduce
    return model


@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW's learning rate")
    parser.add_argument("--sgd-lr", type=float, default=0.1, help="plain SGD's learning rate (the equality checks)")
    parser.add_argument("--tol", type=float, default=1e-5, help="|difference| counted as 'differs' in fraction_over_tol")
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 128])
    parser.add_argument("--small-eps", type=float, default=1e-12, help="AdamW's eps in the run that shows a check passing the sum")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="folder for a DCP checkpoint of the float32 FSDP run")
    args = parser.parse_args()
    with process_group() as ctx:
        rank, world, device_type = ctx.rank, ctx.world_size, ctx.device.type
        data = torch.load(args.data, weights_only=True)
        x, y = data["x"].to(device_type), data["y"].to(device_type)
        if len(x) % world:
            raise ValueError(f"the batch of {len(x)} rows does not split evenly over {world} ranks")
        per_rank = len(x) // world
        local_x, local_y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]

        def adamw(params):
            return torch.optim.AdamW(params, lr=args.lr)

        def sgd(params):
            return torch.optim.SGD(params, lr=args.sgd_lr)  # no momentum: the update is lr * gradient

        torch.manual_seed(args.seed)  # the same initial weights on every rank
        base = MLP(784, tuple(args.hidden), 10, dropout=0.0).to(device_type)
        results: dict = {"world": world, "steps": args.steps, "batch": len(x), "n_params": sum(p.numel() for p in base.parameters()),
                         "param_bytes": sum(p.nbytes for p in base.parameters()),
                         "layer_bytes": {n: sum(p.nbytes for p in m.parameters()) for n, m in base.named_modules()
                                         if isinstance(m, nn.Linear)},
                         # what FSDP really allocates for a gathered layer: dim 0 padded to a multiple of the world size
                         "padded_layer_bytes": {n: sum(padded_nbytes(p, world) for p in m.parameters())
                                                for n, m in base.named_modules() if isinstance(m, nn.Linear)}}

        # ---- AdamW: the layout in bytes, bfloat16, and the checkpoint --------------------------------
        reference = copy.deepcopy(base)
        ref_losses, _, _ = train(reference, x, y, args.steps, adamw, reduce_losses=False)
        results["reference"] = {"losses": ref_losses}

        ddp = DistributedDataParallel(copy.deepcopy(base))
        losses, opt, _ = train(ddp, local_x, local_y, args.steps, adamw, reduce_losses=True)
        results["ddp"] = {"losses": losses, "bytes": gather_object(memory_bytes(ddp, opt)),
                          "max_diff": max_diff(ddp.module, reference)}
        del ddp, opt

        for name, policy in (("fsdp_fp32", MixedPrecisionPolicy()),
                             ("fsdp_bf16", MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))):
            model = shard_mlp(copy.deepcopy(base), mp_policy=policy)
            losses, opt, _ = train(model, local_x, local_y, args.steps, adamw, reduce_losses=True)
            first = next(model.parameters())
            results[name] = {
                "losses": losses,
                "bytes": gather_object(memory_bytes(model, opt)),
                "max_diff": max_diff(model, reference),
                "param_type": type(first).__name__,
                "param_dtype": str(first.dtype),
                "placements": {n: [str(p.placements), list(p.shape), list(p.to_local().shape)] for n, p in model.named_parameters()},
            }
            print(f"{name}: losses {losses}, max |param - reference| {results[name]['max_diff']:.2e}")
            if name == "fsdp_fp32" and args.checkpoint:
                model_sd, optim_sd = get_state_dict(model, opt)  # DTensors: each rank holds its shards
                dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=args.checkpoint)
                full = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered to rank 0 only
                full_model, full_optim = get_state_dict(model, opt, options=full)
                if rank == 0:
                    save_rank0(Path(args.out) / "full_state.pt", {"model": full_model, "optim": full_optim})
                results["checkpoint_keys"] = sorted(model_sd)
            del model, opt
        # A wrong reduction under AdamW: summed instead of averaged gradients are a constant factor (the world
        # size) too large, and Adam's m / sqrt(v) update does not see a constant factor (up to its eps).
        model = _sum_instead_of_mean(shard_mlp(copy.deepcopy(base)))
        losses, _, _ = train(model, local_x, local_y, args.steps, adamw, reduce_losses=True)
        results["fsdp_sum_adamw"] = {"losses": losses, "max_diff": max_diff(model, reference), "fraction_over_tol": fraction_over(model, reference, args.tol)}
        del model
        # The sum acts like AdamW with eps / world (2 m / (2 sqrt(v) + eps) = m / (sqrt(v) + eps / 2)): with a smaller
        # eps fewer gradients are near it, and the same check passes the wrong reduction. Reference and sum, eps = --small-eps.
        def adamw_small_eps(params):
            return torch.optim.AdamW(params, lr=args.lr, eps=args.small_eps)

        reference_small_eps = copy.deepcopy(base)
        train(reference_small_eps, x, y, args.steps, adamw_small_eps, reduce_losses=False)
        model = _sum_instead_of_mean(shard_mlp(copy.deepcopy(base)))
        train(model, local_x, local_y, args.steps, adamw_small_eps, reduce_losses=True)
        results["fsdp_sum_adamw_small_eps"] = {"eps": args.small_eps, "max_diff": max_diff(model, reference_small_eps),
                                               "fraction_over_tol": fraction_over(model, reference_small_eps, args.tol)}
        del model, reference_small_eps

        # ---- plain SGD: equality of gradients and parameters, negative controls, measured memory -------
        reference = copy.deepcopy(base)
        tracker = UnshardedBytes(reference)
        sgd_ref_losses, _, ref_grads = train(reference, x, y, args.steps, sgd, reduce_losses=False, tracker=tracker)
        tracker.remove()
        runs = {"reference": {"losses": sgd_ref_losses, "unsharded": _first_step(tracker.samples)}}
        variants = {
            "ddp": lambda m: DistributedDataParallel(m),
            "fsdp": lambda m: shard_mlp(m),  # reshard_after_forward defaults: True per layer, False for the root
            "fsdp_keep": lambda m: shard_mlp(m, reshard_after_forward=False),  # keep every layer gathered until backward
            "fsdp_root_only": lambda m: shard_mlp(m, per_layer=False),  # one unit: the whole model gathered at once
            "fsdp_sum": lambda m: _sum_instead_of_mean(shard_mlp(m)),  # negative control: a wrong reduction
            "no_allreduce": lambda m: m,  # negative control: each rank trains on its half alone, no communication
        }
        for name, wrap in variants.items():
            model = wrap(copy.deepcopy(base))
            tracker = UnshardedBytes(model)
            losses, _, grads = train(model, local_x, local_y, args.steps, sgd, reduce_losses=True, tracker=tracker)
            tracker.remove()
            plain = model.module if isinstance(model, DistributedDataParallel) else model
            runs[name] = {"losses": losses, "grad_diff": grad_diff(grads, ref_grads), "max_diff": max_diff(plain, reference),
                          "grad_scale": grad_scale(grads, ref_grads), "fraction_over_tol": fraction_over(plain, reference, args.tol),
                          "unsharded": _first_step(tracker.samples), "sharded_bytes": tracker.sharded_bytes}
            print(f"SGD {name}: max |grad - reference| {runs[name]['grad_diff']:.1e}, "
                  f"max |param - reference| {runs[name]['max_diff']:.1e}")
            del model
        results["sgd"] = runs
        results["sgd_lr"] = args.sgd_lr
        if rank == 0:
            write_json(Path(args.out) / "fsdp.json", results)


def _sum_instead_of_mean(model: nn.Module) -> nn.Module:
    """Make every FSDP unit of ``model`` sum the ranks' gradients instead of averaging them (a deliberate bug).

    ``set_gradient_divide_factor`` acts on one unit's own parameters only, so it is set on each unit;
    ``set_force_sum_reduction_for_comms`` makes the reduce-scatter a plain SUM followed by a division
    (by 1 here), which gloo supports (a factor alone asks for NCCL's ``PREMUL_SUM``).
    """
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)  # a SUM reduce-scatter (gloo has no PREMUL_SUM)
            module.set_gradient_divide_factor(1.0)  # ... divided by 1 instead of by the world size
    return model


def _first_step(samples: list) -> list:
    """The samples of the first step: up to and including "after backward"."""
    labels = [sample[0] for sample in samples]
    end = labels.index("after backward") + 1
    return [list(sample) for sample in samples[:end]]


if __name__ == "__main__":
    run_main(main)
