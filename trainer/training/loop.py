"""The per-rank training loop: run by Ray Train's ``TorchTrainer`` (one process per rank) or in
the calling process (one rank; :mod:`~pdeladder.trainer.training.session`).

Per stage: build the model (warm-started from the previous stage's weights, Fourier modes grown
to the stage's), shard it with FSDP2 ``fully_shard`` (each Fourier block, then the root) or
replicate it with DDP (the stage's ``shard``, :func:`~pdeladder.trainer.distributed.choose.
shard_for`), train
``steps`` supervised steps on the rank's shard of the stage's store groups, then optionally
``self_improvement.steps`` steps on the PDE residual of unsolved samples drawn from the stage's
distribution plus a data anchor. Checkpoints are written with ``torch.distributed.checkpoint`` in
safetensors shards (no pickles; each rank writes its own) and handed to the session; a restarted
worker group, or a rerun in process, resumes from the latest one.
"""

import hashlib
import json
import os
import resource
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

from pdeladder.curriculum.settings import LossWeights, SelfImprovement
from pdeladder.dataset.catalog import Catalog
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.slots import SlotLayout
from pdeladder.slabs import DomainTiling, Slab
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
from pdeladder.trainer.losses.data import relative_loss
from pdeladder.trainer.losses.equation import equation_loss
from pdeladder.trainer.losses.weighting import combine
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.models.operator import LadderOperator
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.refine import direct, refine_batch
from pdeladder.trainer.training.augment import Augmentation
from pdeladder.trainer.training.config import StageConfig
from pdeladder.trainer.training.schedule import learning_rate
from pdeladder.trainer.training.session import RayTrainSession, TrainSession
from pdeladder.trainer.training.timing import PhaseClock
from pdeladder.trainer.training.unsolved import draw_unsolved, solver_seeds
from pdeladder.trainer.training.validation import held_out_sums

STATE_FILE = "state.json"


def build_model(cfg: StageConfig) -> LadderOperator:
    """The stage's model: fresh, or the warm start's weights with modes grown to the stage's."""
    if cfg.warm_start is None:
        return LadderOperator(cfg.model)
    model, _ = load_model(cfg.warm_start)
    if model.config.modes != cfg.model.modes:
        for block in model.blocks:
            block.spectral.grow_modes(cfg.model.modes)
        model.config = cfg.model
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


def _held_out(model, processor, data, domain) -> dict[str, float]:
    sums = held_out_sums(model, processor, data.held_out(), domain)
    dist.all_reduce(sums)
    n = max(float(sums[2]), 1.0)
    return {"held_out_nrmse": float(sums[0]) / n, "held_out_residual": float(sums[1]) / n}


class UnsolvedPool:
    """The self-improvement pool: ``samples`` unsolved draws per stage group, made once per rank
    (identically on every rank), and batches picked from it as a function of the step.

    With ``self_improvement.refine_steps``, each draw's ``fields`` hold a target: the
    minimiser of the residual the equation loss takes, from the initial state held
    (:func:`targeted`). That minimiser lies at the residual's discretisation error from the
    solver's data (benchmarks/RESULTS.md, "The residual's floor"); it depends on the draw
    alone, not on the model, so a resumed run makes the same targets."""

    def __init__(self, cfg: StageConfig, processor: DataProcessor):
        taken = solver_seeds(cfg.store_url, list(cfg.paths))
        self_improvement = cfg.self_improvement
        self.pools = [
            [
                draw_unsolved(cfg.layout, spec, 1, seed=[cfg.seed, k, i], taken=taken)
                for i in range(self_improvement.samples)
            ]
            for k, spec in enumerate(cfg.unsolved)
        ]
        if refine := self_improvement.refine_steps:
            self.pools = [targeted(processor, pool, refine) for pool in self.pools]
        self.batch_size, self.seed = cfg.batch_size, cfg.seed

    def batch(self, step: int, rank: int) -> dict[str, Any]:
        """The batch of data-parallel group ``rank`` at ``step``."""
        rng = np.random.default_rng([self.seed, step, rank])
        pool = self.pools[step % len(self.pools)]
        picks = rng.choice(len(pool), size=min(self.batch_size, len(pool)), replace=False)
        chosen = [pool[i] for i in sorted(picks)]
        tensors = [k for k, v in chosen[0].items() if isinstance(v, torch.Tensor)]
        return {**chosen[0], **{k: torch.cat([c[k] for c in chosen]) for k in tensors}}


def targeted(
    processor: DataProcessor, draws: list[dict[str, Any]], steps: int
) -> list[dict[str, Any]]:
    """One group's unsolved ``draws`` (one sample each), each with its residual's minimiser as
    its fields and ``target`` set (:class:`UnsolvedPool`; each alone): at most ``steps``
    Gauss–Newton iterations from the inputs and initial state held
    (:func:`~pdeladder.trainer.refine.least_squares`), up to its size limit; beyond it, a
    time series's ``steps`` L-BFGS steps, and a steady draw as it is, ``target`` unset (the
    residual of an elliptic problem converges too slowly under L-BFGS to give one)."""
    tensors = [k for k, v in draws[0].items() if isinstance(v, torch.Tensor)]
    batch = {**draws[0], **{k: torch.cat([d[k] for d in draws]) for k in tensors}}
    given = processor.fields(batch)  # (B, C, T, X, Y, Z): snapshot 0 given, the rest zero
    grid, layout = batch["grid"], processor.layout
    fam = processor.family(batch)
    predicted = batch["predicted"][0, layout.slot_indices(fam, grid.dim)].bool()
    if grid.snapshots == 1 and not direct(fam.name, predicted, given.shape[2:], grid.dim):
        return [{**d, "target": torch.zeros(1, dtype=torch.bool)} for d in draws]
    held = given[:, :, :1].expand_as(given)  # the inputs and initial state held
    out, _ = refine_batch(held, given, batch, layout, steps)
    fields = out.to(batch["fields"].dtype)
    return [
        {**d, "fields": fields[i : i + 1], "target": torch.ones(1, dtype=torch.bool)}
        for i, d in enumerate(draws)
    ]


def check_same_weights(model: torch.nn.Module) -> None:
    """Raise unless every rank built bitwise the same weights (before sharding: FSDP and the
    domain ranks' exactness both rest on it)."""
    digest = hashlib.sha256()
    for p in model.state_dict().values():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    digests = [None] * dist.get_world_size()
    dist.all_gather_object(digests, digest.hexdigest())
    if len(set(digests)) != 1:
        raise RuntimeError(f"ranks built different initial weights: {digests}")


def slab_of(batch: dict[str, Any], domain: DomainGroup | None) -> Slab | None:
    """This rank's slab of the batch's grid ``(T, X, Y, Z)``, carrying ``domain``; ``None``
    without a domain group."""
    grid = batch["grid"]
    return domain.slab(grid.space_time) if domain is not None else None


def local_part(batch: dict[str, Any], slab: Slab | None) -> dict[str, Any]:
    """The batch with its whole-sample ``fields`` ``(B, C, T, X, Y, Z)`` cut to ``slab``'s x
    range (the unsolved draws are made whole; solver batches are read as slabs)."""
    if slab is None:
        return batch
    return {**batch, "fields": batch["fields"][:, :, :, slab.lo[1] : slab.hi[1]]}


def step_losses(
    model: torch.nn.Module,
    processor: DataProcessor,
    batch: dict[str, Any],
    unsolved: dict[str, Any] | None,
    layout: SlotLayout,
    weights: LossWeights,
    self_improvement: SelfImprovement | None,
    domain: DomainGroup | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor], torch.Tensor]:
    """One step's ``(loss, data loss, equation loss, residual per family, inputs)``: supervised
    (the data loss plus, when ``weights.residual`` > 0, the residual of the prediction; the
    stage's ``training.loss``) or, given an ``unsolved`` batch, self-improvement (the residual on
    it plus the data anchor, weighted by the stage's ``training.self_improvement``)."""
    slab = slab_of(batch, domain)
    x, family = processor.inputs(batch)
    pred = model(x, family, slab).float()
    inside, target = processor.inside(batch), processor.normalised(batch)
    data_loss = relative_loss(
        pred, target, batch["predicted"], h1=weights.h1, inside=inside, slab=slab
    )
    if unsolved is None:
        eq_loss, per_family = None, {}
        if weights.residual > 0:
            physical = processor.physical(pred, family)
            eq_loss, per_family = equation_loss(
                physical, processor.fields(batch), batch, layout, slab=slab
            )
        return combine(weights, data_loss, eq_loss), data_loss, eq_loss, per_family, x
    uslab = slab_of(unsolved, domain)
    unsolved = local_part(unsolved, uslab)
    ux, ufam = processor.inputs(unsolved)
    unorm = model(ux, ufam, uslab).float()
    upred = processor.physical(unorm, ufam)
    given = processor.fields(unsolved)
    eq_loss, per_family = equation_loss(upred, given, unsolved, layout, slab=uslab)
    loss = (
        self_improvement.residual_weight * eq_loss + self_improvement.data_anchor_weight * data_loss
    )
    if self_improvement.refine_steps:  # the draws' targets (where a draw has one)
        has = unsolved["target"][:, None] & unsolved["predicted"]
        uinside = processor.inside(unsolved)
        target_loss = relative_loss(
            unorm, processor.normalised(unsolved), has, inside=uinside, slab=uslab
        )
        loss = loss + self_improvement.target_weight * target_loss
    return loss, data_loss, eq_loss, per_family, x


def adamw(parameters, lr: float) -> torch.optim.AdamW:
    """AdamW (weight decay 1e-4) fused into one kernel over all parameters (FSDP2's DTensors
    included): on the CPU its step takes about a third of the per-parameter loop's
    (benchmarks/RESULTS.md, "Fused AdamW and Ray Train's fixed cost")."""
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=1e-4, fused=True)


def peak_memory(device: torch.device) -> dict[str, float]:
    """This process's peak resident memory and, on a GPU, the allocator's peak, in MiB."""
    out = {"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if device.type == "cuda":
        out["cuda_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry point; ``config``: ``{"stage": StageConfig, "metrics_queue": queue}``,
    the queue (a ``ray.util.queue.Queue`` or None) receiving rank 0's metrics at every log."""
    train_stage(config["stage"], RayTrainSession(), config.get("metrics_queue"))


def train_stage(cfg: StageConfig, session: TrainSession, queue: Any = None) -> None:
    """Train one stage as rank ``session.rank`` of ``session.world_size`` (the process group
    open); ``queue`` (anything with ``put``, or None) receives rank 0's metrics at every log."""
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        _train_stage(cfg, session, queue)
    finally:  # in process, the caller goes on with its own
        torch.set_num_threads(threads)


def _train_stage(cfg: StageConfig, session: TrainSession, queue: Any) -> None:
    rank, world_size, device = session.rank, session.world_size, session.device
    clock = PhaseClock(device)
    padding = cfg.model.padding  # the slabs cut the padded grid
    tiling = DomainTiling(x=cfg.domain_ranks, padding=padding)
    dims = ParallelDims.of(world_size, tiling, cfg.shard, cfg.mixing)
    domain = dims.build(device.type)[1] if dims.domain.size > 1 else None
    dp_rank = dims.dp_rank(rank)
    torch.manual_seed(cfg.seed)
    layout = cfg.layout
    operator = build_model(cfg).to(device)
    check_same_weights(operator)
    operator.checkpointing, operator.offload = cfg.activation_checkpointing, cfg.offload
    model = parallelize(operator, dims, domain, device)  # operator itself, or a wrapper of it
    local = sum(getattr(p, "to_local", lambda p=p: p)().numel() for p in model.parameters())
    sharded_fraction = local / sum(p.numel() for p in model.parameters())
    optimizer = adamw(model.parameters(), cfg.learning_rate.initial)
    processor = DataProcessor(layout, device)
    catalog = Catalog.build(
        cfg.store_url, groups=list(cfg.paths), layout=layout, held_out=cfg.held_out
    )
    data = StoreDataset(
        catalog,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        rank=dp_rank,
        dp=dims.dp,
        domain=domain,
        normalise=device.type == "cpu",  # in the reader threads; a GPU normalises on itself
    )
    augment = Augmentation(processor, cfg.seed, dp_rank, domain)
    self_improvement = cfg.self_improvement
    supervised, total = cfg.steps, cfg.total_steps
    per_epoch = len(data.plan(0))  # steps that visit every training sample once

    step, resumed_from, scores = 0, 0, {}
    with session.latest_checkpoint() as folder:
        if folder is not None:
            state = load_training_state(folder, model, optimizer)
            step = resumed_from = state["step"]
            scores = state.get("scores", {})
    pids = [None] * world_size
    dist.all_gather_object(pids, os.getpid())
    pool = UnsolvedPool(cfg, processor) if self_improvement else None
    batches = data.batches(step)

    t_last, samples_since, steps_since = time.perf_counter(), 0, 0
    model.train()
    clock.started()
    try:
        while step < total:
            if step == supervised and self_improvement and "before" not in scores:
                with clock("evaluation"):
                    scores["before"] = _held_out(model, processor, data, domain)
            lr = learning_rate(step, total, cfg.learning_rate)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with clock("data"):
                batch = processor.to_device(next(batches))
                if cfg.augment:
                    batch = augment(batch, step)
                if step >= supervised:
                    unsolved = processor.to_device(pool.batch(step, dp_rank))
            with clock("compute"):
                loss, data_loss, eq_loss, per_family, x = step_losses(
                    model, processor, batch, unsolved if step >= supervised else None,
                    layout, cfg.loss, self_improvement, domain,
                )  # fmt: skip
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            with clock("optimizer"):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            step += 1
            samples_since += x.shape[0]
            steps_since += 1

            last = step == total
            checkpointing = step % cfg.checkpoint_every == 0 or last
            if not (checkpointing or step % cfg.log_every == 0):
                continue
            with clock("reporting"):
                terms = (loss, data_loss, eq_loss)
                loss_v, data_v, eq_v = _all_mean([0.0 if t is None else t.item() for t in terms])
                elapsed = time.perf_counter() - t_last
                peaks = [None] * world_size
                dist.all_gather_object(peaks, peak_memory(device))
                sent = sum(domain.sent.values()) if domain is not None else 0
                metrics = {
                    "stage": cfg.stage,
                    "step": step,
                    "total_steps": total,
                    "supervised_steps": supervised,
                    "phase": "supervised" if step <= supervised else "self_improvement",
                    "loss": loss_v,
                    "data_loss": data_v,
                    "equation_loss": eq_v,
                    "lr": lr,
                    "epochs": step / per_epoch,
                    "samples_per_s": samples_since * dims.dp / max(elapsed, 1e-9),
                    "dp": dims.dp,
                    "domain_ranks": dims.domain.size,
                    "shard": dims.shard,
                    "mixing": dims.mixing,
                    "threads": torch.get_num_threads(),
                    "peak_rss_mb": [p["rss_mb"] for p in peaks],
                    **(
                        {"peak_cuda_mb": [p["cuda_mb"] for p in peaks]}
                        if device.type == "cuda"
                        else {}
                    ),
                    "comm_bytes_per_step": sent / max(steps_since, 1),
                    "resumed_from": resumed_from,
                    "worker_pids": pids,
                    "sharded_fraction": sharded_fraction,
                    **{f"residual/{k}": float(v) for k, v in per_family.items()},
                }
                if domain is not None:
                    domain.sent.clear()
            if last:
                with clock("evaluation"):
                    scores["after"] = _held_out(model, processor, data, domain)
                for when, values in scores.items():
                    metrics |= {f"{k}_{when}": v for k, v in values.items()}
            metrics |= clock.metrics()
            if rank == 0 and queue is not None:
                with clock("reporting"):  # counted in the next metrics
                    queue.put(metrics)
            if checkpointing:
                with clock("checkpoint"), tempfile.TemporaryDirectory() as folder:
                    state = {
                        "stage": cfg.stage,
                        "step": step,
                        "model": operator.config.to_json(),
                        "model_class": LadderOperator.name,
                        "layout": layout.to_json(),
                        "paths": list(cfg.paths),
                        "augmented": cfg.augment,
                        "scores": scores,
                        "metrics": metrics,
                    }
                    save_training_state(folder, model, optimizer, state)
                    session.report(metrics, folder)
            t_last, samples_since, steps_since = time.perf_counter(), 0, 0
    finally:
        batches.close()  # waits for the reads still in flight (a failed stage's too)
