"""The per-worker training loop run by Ray Train's ``TorchTrainer`` (one process per rank).

Per stage: build the model (warm-started from the previous stage's weights, Fourier modes grown
to the stage's), shard it with FSDP2 ``fully_shard`` (each Fourier block, then the root), train
``steps`` supervised steps on the rank's shard of the stage's store groups, then optionally
``self_improvement.steps`` steps on the PDE residual of unsolved samples drawn from the stage's
distribution plus a data anchor. Checkpoints are written with ``torch.distributed.checkpoint`` in
safetensors shards (no pickles; each rank writes its own) and reported with
``ray.train.report``; a restarted worker group resumes from the latest one.
"""

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from pdeladder.solvers.grid import Grid
from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
from pdeladder.trainer.losses.data import relative_loss
from pdeladder.trainer.losses.equation import equation_loss
from pdeladder.trainer.losses.weighting import LossWeights
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig
from pdeladder.trainer.training.data import StoreBatches
from pdeladder.trainer.training.layout import SlotLayout
from pdeladder.trainer.training.processor import DataProcessor
from pdeladder.trainer.training.schedule import learning_rate
from pdeladder.trainer.training.unsolved import UnsolvedSpec, draw_unsolved, solver_seeds
from pdeladder.trainer.training.validation import held_out_sums

STATE_FILE = "state.json"


def build_model(cfg: dict[str, Any]) -> LadderOperator:
    """The stage's model: fresh, or the warm start's weights with modes grown to the stage's."""
    config = OperatorConfig.from_json(cfg["model"])
    if not cfg.get("warm_start"):
        return LadderOperator(config)
    model, _ = load_model(cfg["warm_start"])
    if model.config.modes != config.modes:
        for block in model.blocks:
            block.spectral.grow_modes(config.modes)
        model.config = config
    return model


def _flat_state(model, optimizer) -> tuple[dict, dict, dict[str, torch.Tensor]]:
    msd, osd = get_state_dict(
        model, optimizer, options=StateDictOptions(flatten_optimizer_state_dict=True)
    )
    tensors = {f"model.{k}": v for k, v in msd.items()}
    tensors |= {f"optim.{k}": v for k, v in osd.items() if isinstance(v, torch.Tensor)}
    return msd, osd, tensors


def save_training_state(folder: str, model, optimizer, state: dict[str, Any]) -> None:
    """Every rank writes its shards of model and optimizer state; rank 0 also the JSON state."""
    _, _, tensors = _flat_state(model, optimizer)
    dcp.save(tensors, storage_writer=HuggingFaceStorageWriter(folder, save_distributed=True))
    if dist.get_rank() == 0:
        Path(folder, STATE_FILE).write_text(json.dumps(state, indent=2))


def load_training_state(folder: str, model, optimizer) -> dict[str, Any]:
    """Load the sharded model and optimizer state saved by :func:`save_training_state`."""
    msd, osd, tensors = _flat_state(model, optimizer)
    dcp.load(tensors, storage_reader=HuggingFaceStorageReader(folder))
    msd = {k: tensors[f"model.{k}"] for k in msd}
    osd = {k: tensors.get(f"optim.{k}", v) for k, v in osd.items()}
    set_state_dict(
        model,
        optimizer,
        model_state_dict=msd,
        optim_state_dict=osd,
        options=StateDictOptions(flatten_optimizer_state_dict=True),
    )
    return json.loads(Path(folder, STATE_FILE).read_text())


def _all_mean(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return (t / dist.get_world_size()).tolist()


def _held_out(model, processor, data) -> dict[str, float]:
    sums = held_out_sums(model, processor, data.held_out())
    dist.all_reduce(sums)
    n = max(float(sums[2]), 1.0)
    return {"held_out_nrmse": float(sums[0]) / n, "held_out_residual": float(sums[1]) / n}


class UnsolvedPool:
    """The self-improvement pool: ``samples`` unsolved draws per stage group, made once per rank
    (identically on every rank), and batches picked from it as a function of the step."""

    def __init__(self, cfg: dict[str, Any], layout: SlotLayout):
        si = cfg["self_improvement"]
        taken = solver_seeds(cfg["store_url"], cfg["paths"])
        self.pools = []
        for k, raw in enumerate(cfg["unsolved"]):
            spec = UnsolvedSpec(raw["family"], Grid(**raw["grid"]), raw["ranges"])
            draws = [
                draw_unsolved(layout, spec, 1, seed=[cfg["seed"], k, i], taken=taken)
                for i in range(si["samples"])
            ]
            self.pools.append(draws)
        self.batch_size, self.seed = cfg["batch_size"], cfg["seed"]

    def batch(self, step: int, rank: int) -> dict[str, Any]:
        rng = np.random.default_rng([self.seed, step, rank])
        pool = self.pools[step % len(self.pools)]
        picks = rng.choice(len(pool), size=min(self.batch_size, len(pool)), replace=False)
        chosen = [pool[i] for i in sorted(picks)]
        out = {k: torch.cat([c[k] for c in chosen]) for k in chosen[0] if k != "grid"}
        return {**out, "grid": chosen[0]["grid"]}


def train_loop_per_worker(cfg: dict[str, Any]) -> None:
    """Ray Train entry point; ``cfg`` is built by :func:`pdeladder.trainer.training.run.stage_config`."""
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    torch.manual_seed(cfg["seed"])
    layout = SlotLayout.from_json(cfg["layout"])
    model = build_model(cfg).to(device)
    model.checkpointing = cfg["activation_checkpointing"]
    model = parallelize(model, ParallelDims(dp=world), None, device)
    local = sum(p.to_local().numel() for p in model.parameters())
    sharded_fraction = local / sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"]["initial"], weight_decay=1e-4)
    processor = DataProcessor(layout, device)
    data = StoreBatches(
        store_url=cfg["store_url"],
        paths=cfg["paths"],
        layout=layout,
        batch_size=cfg["batch_size"],
        rank=rank,
        world=world,
        seed=cfg["seed"],
        held_out=cfg["held_out"],
    )
    weights = LossWeights(**cfg["weights"])
    si = cfg.get("self_improvement")
    supervised, total = cfg["steps"], cfg["steps"] + (si["steps"] if si else 0)

    step, resumed_from, scores = 0, 0, {}
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = load_training_state(folder, model, optimizer)
        step = resumed_from = state["step"]
        scores = state.get("scores", {})
    pids = [None] * world
    dist.all_gather_object(pids, os.getpid())
    pool = UnsolvedPool(cfg, layout) if si else None
    batches = data.batches(step)

    queue = cfg.get("metrics_queue")
    t_last, samples_since = time.perf_counter(), 0
    model.train()
    while step < total:
        if step == supervised and si and "before" not in scores:
            scores["before"] = _held_out(model, processor, data)
        lr = learning_rate(step, total, cfg["lr"])
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = processor.to_device(next(batches))
        x, family = processor.inputs(batch)
        pred = model(x, family).float()
        target = processor.normalised(batch)
        data_loss = relative_loss(pred, target, batch["predicted"], h1=weights.h1)
        eq_loss, per_family = None, {}
        if step < supervised:
            if weights.equation > 0:
                eq_loss, per_family = equation_loss(processor.physical(pred, family), batch, layout)
            loss = weights.combine(data_loss, eq_loss)
        else:
            unsolved = processor.to_device(pool.batch(step, rank))
            ux, ufam = processor.inputs(unsolved)
            upred = processor.physical(model(ux, ufam).float(), ufam)
            eq_loss, per_family = equation_loss(upred, unsolved, layout)
            loss = si["residual_weight"] * eq_loss + si["data_anchor_weight"] * data_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        samples_since += x.shape[0]

        last = step == total
        if step % cfg["log_every"] == 0 or last or step % cfg["checkpoint_every"] == 0:
            loss_v, data_v, eq_v = _all_mean(
                [float(loss), float(data_loss), float(eq_loss) if eq_loss is not None else 0.0]
            )
            elapsed = time.perf_counter() - t_last
            metrics = {
                "stage": cfg["stage"],
                "step": step,
                "total_steps": total,
                "phase": "supervised" if step <= supervised else "self_improvement",
                "loss": loss_v,
                "data_loss": data_v,
                "equation_loss": eq_v,
                "lr": lr,
                "samples_per_s": samples_since * world / max(elapsed, 1e-9),
                "resumed_from": resumed_from,
                "worker_pids": pids,
                "sharded_fraction": sharded_fraction,
                **{f"residual/{k}": v for k, v in per_family.items()},
            }
            t_last, samples_since = time.perf_counter(), 0
            if last:
                scores["after"] = _held_out(model, processor, data)
                for when, values in scores.items():
                    metrics |= {f"{k}_{when}": v for k, v in values.items()}
            if rank == 0 and queue is not None:
                queue.put(metrics)
            if step % cfg["checkpoint_every"] == 0 or last:
                with tempfile.TemporaryDirectory() as folder:
                    state = {
                        "stage": cfg["stage"],
                        "step": step,
                        "model": model.config.to_json(),
                        "model_class": LadderOperator.name,
                        "layout": layout.to_json(),
                        "paths": cfg["paths"],
                        "scores": scores,
                        "metrics": metrics,
                    }
                    save_training_state(folder, model, optimizer, state)
                    ray.train.report(
                        metrics, checkpoint=ray.train.Checkpoint.from_directory(folder)
                    )
            else:
                ray.train.report(metrics)
    batches.close()  # waits for the reads still in flight
