"""One rank of the scale model's checks against real steps (run by test_scale.py).

``python scale_rank.py RANK WORLD INIT_URL OUT_JSON``: joins a gloo group of WORLD processes
(one domain group), parallelizes the model as training does (the sharded transform, FSDP2) and,
on this rank's x slab, runs

- ``sent``: per mixing of the kept modes and case of ``CASES``, one forward and backward pass
  with the data loss, with and without checkpointing, L2 and H1:
  ``{mixing: {case: DomainGroup.sent}}``;
- ``memory``: per case of ``MEMORY``, training steps as the trainer takes them (the batch's
  fields, the model input and the normalised target held; the relative L2 loss, backward,
  gradient clipping, the trainer's AdamW): ``{case: peak tensor bytes}``, the tensors held between steps
  (parameter and optimizer shards, the batch) plus the peak of the bytes allocated and alive at
  once during one step (the profiler's memory events; the lower of two steps), as a GPU's
  caching allocator counts its peak.

Each rank writes ``{"sent": .., "memory": ..}`` to ``OUT_JSON.RANK``.
"""

import dataclasses
import gc
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from pdeladder.dataset.slots import SlotLayout
from pdeladder.slabs import DomainTiling
from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
from pdeladder.trainer.losses.data import relative_loss
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.training.loop import adamw

#: (name, sample (T, C, X, Y, Z), modes, batch, checkpointing, loss)
CASES = [
    ("2d l2", (5, 2, 13, 6, 1), (2, 3, 2, 1), 2, False, "l2"),
    ("2d h1 checkpointed", (5, 2, 13, 6, 1), (2, 3, 2, 1), 2, True, "h1"),
    ("3d h1", (3, 2, 12, 5, 4), (2, 3, 2, 2), 1, False, "h1"),
    ("1d l2 checkpointed", (6, 2, 20, 1, 1), (3, 4, 1, 1), 3, True, "l2"),
]
#: (name, sample (T, C, X, Y, Z), modes, width, batch, checkpointing): activations outweigh the
#: parameters, as on the samples the model is for
MEMORY = [
    ("2d", (7, 2, 32, 24, 1), (3, 4, 4, 1), 8, 1, False),
    ("2d checkpointed", (7, 2, 32, 24, 1), (3, 4, 4, 1), 8, 1, True),
    ("3d", (4, 2, 16, 12, 8), (2, 3, 3, 2), 8, 1, False),
    ("3d checkpointed", (4, 2, 16, 12, 8), (2, 3, 3, 2), 8, 1, True),
]


def config(modes, width: int = 6) -> OperatorConfig:
    return OperatorConfig(3, 2, width=width, layers=3, modes=modes, families=1)


def processor(channels: int) -> DataProcessor:
    """The data processor of one family with ``channels`` slots and unit normalisation."""
    unit = {"f": {"mean": [0.0] * channels, "std": [1.0] * channels}}
    return DataProcessor(SlotLayout(["f"], [f"c{i}" for i in range(channels)], 0, unit))


def held_bytes(*tensors: torch.Tensor) -> int:
    """Bytes of the distinct storages behind ``tensors`` (FSDP shards: their local storage)."""
    storages = {}
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


def step_peak(step, forward_extra: int) -> int:
    """Peak bytes of the tensors allocated during ``step()`` and alive at once (the profiler's
    running total, less its value before the step's first allocation), ``forward_extra`` bytes
    added while the step's ``"forward"`` range runs."""
    from torch.profiler import ProfilerActivity, profile

    gc.collect()  # no earlier case's tensors freed during the step
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        prof.export_chrome_trace(trace.name)
        events = sorted(json.loads(Path(trace.name).read_text())["traceEvents"], key=_ts)
    forward = next(e for e in events if e.get("name") == "forward" and e.get("ph") == "X")
    memory = [e for e in events if e.get("name") == "[memory]"]
    before = memory[0]["args"]["Total Allocated"] - memory[0]["args"]["Bytes"]
    during = [
        e["args"]["Total Allocated"] + forward_extra * (e["ts"] <= forward["ts"] + forward["dur"])
        for e in memory
    ]
    return max(during) - before


def _ts(event: dict) -> float:
    return float(event.get("ts", 0))


def measured_peak(dims, domain, sample, modes, width, batch, checkpointing) -> int:
    """Peak tensor bytes of a training step on this rank's slab of ``sample``, taken in the
    trainer's order: the last step's gradients are dropped after the forward pass."""
    t, c, x, y, z = sample
    torch.manual_seed(0)
    model = parallelize(LadderOperator(config(modes, width)), dims, domain, torch.device("cpu"))
    model.checkpointing = checkpointing
    optimizer = adamw(model.parameters(), 1e-3)
    slab = domain.slab((t, x, y, z))
    g = torch.Generator().manual_seed(1)
    shape = (batch, c, t, *slab.local_shape[1:])  # the loader's (B, C, T, x, Y, Z)
    fields, normalised = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    inputs = torch.randn(batch, 3, *slab.local_shape, generator=g)
    # the target as the trainer takes it: the loader's normalised fields
    target = processor(c).normalised({"fields": fields, "normalised": normalised})
    family = torch.zeros(batch, dtype=torch.long)
    mask = torch.ones(batch, c, dtype=torch.bool)

    def step():
        with torch.profiler.record_function("forward"):
            loss = relative_loss(model(inputs, family, slab), target, mask, slab=slab)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    step()  # the optimizer's state and the gradients are made in the first step
    states = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    held = held_bytes(*model.parameters(), *states, fields, inputs, target, family, mask)
    grads = held_bytes(*(p.grad for p in model.parameters()))
    # the lower of two steps: a one-off allocation elsewhere in the process does not count
    return held + min(step_peak(step, grads) for _ in range(2))


def sent(dims, domain) -> dict[str, dict[str, int]]:
    """``{case: DomainGroup.sent}`` of one forward and backward pass per case of ``CASES``."""
    results = {}
    for name, (t, _, x, y, z), modes, batch, checkpointing, loss in CASES:
        grid = (t, x, y, z)
        torch.manual_seed(0)
        model = parallelize(LadderOperator(config(modes)), dims, domain, torch.device("cpu"))
        model.checkpointing = checkpointing
        slab = domain.slab(grid)
        g = torch.Generator().manual_seed(1)
        inputs = torch.randn(batch, 3, *grid, generator=g)
        target = torch.randn(batch, 2, *grid, generator=g)
        box = (
            slice(None),
            slice(None),
            *(slice(lo, hi) for lo, hi in zip(slab.lo, slab.hi, strict=True)),
        )
        family = torch.zeros(batch, dtype=torch.long)
        mask = torch.ones(batch, 2, dtype=torch.bool)
        domain.sent.clear()
        pred = model(inputs[box], family, slab)
        relative_loss(pred, target[box], mask, h1=loss == "h1", slab=slab).backward()
        results[name] = dict(domain.sent)
    return results


def main() -> None:
    rank, world_size, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    dims = ParallelDims.of(world_size, DomainTiling(x=world_size, padding=0.25))
    domain = dims.build("cpu")[1]
    results = {
        "sent": {m: sent(dataclasses.replace(dims, mixing=m), domain) for m in ("whole", "share")},
        "memory": {case[0]: measured_peak(dims, domain, *case[1:]) for case in MEMORY},
    }
    with open(f"{out}.{rank}", "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
