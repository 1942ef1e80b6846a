"""Predicted rollouts of a model, written into a store of the same format as its input.

``predict_store(checkpoint, store_url, out_url)`` makes, for every group the model knows (or the
groups named), a group of the same path, family, grid, sample count and attributes in the store
at ``out_url``, whose ``fields`` are the model's prediction from each sample's inputs: its
initial state, its input-role channels (a permeability, a velocity field) and its parameters.
Those inputs are copied, not predicted: input-role channels at every snapshot and, for
time-dependent groups, snapshot 0; every other value is the model's. Parameters, seeds and
coordinates are the source's; each sample's provenance names the checkpoint and the source
sample. Outside a domain that is not its whole box (a family with the channel
:data:`~pdeladder.solvers.family.MASK`) every value is 0, as in the solver's data. A failed source sample is recorded as failed (with its reason), a missing one stays
missing. The store's own writer writes every sample (status ok after its data), so the result
is read by xarray, ``store plot``, ``store verify`` and ``evaluate`` like solver data.

Samples stream batch by batch: one batch of source fields and its prediction are in memory at
a time. :func:`predict_into` is the one step that predicts and writes a batch.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.format import (
    FAILED,
    MISSING,
    MUTABLE_ATTRS,
    OK,
    group_metadata,
)
from pdeladder.dataset.group import Group, read_samples
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import Store, open_store
from pdeladder.errors import PdeladderError, UserInputError
from pdeladder.network import local_gloo_env
from pdeladder.outputs import make_output
from pdeladder.processes import tied
from pdeladder.slabs import DomainTiling, Slab, slab_chunk, slabs
from pdeladder.solvers.family import Family, Sample, SolveStats
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.distributed.parallelize import split_samples
from pdeladder.trainer.inference import predict, symmetrized
from pdeladder.trainer.layers.spectral import half_axis
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.refine import check_steps, refine_batch

#: ``progress(group path, samples)`` returns the function called with the number of samples
#: each batch wrote (the CLI draws a bar with it).
Progress = Callable[[str, int], Callable[[int], None]]


def model_groups(
    store: Store, layout: SlotLayout, modes: tuple[int, ...] | None = None
) -> list[str]:
    """The groups of ``store`` the model of ``layout`` (and ``modes``) can predict
    (:func:`knows`)."""
    return [p for p in store.groups() if knows(layout, store.group(p), modes)]


def knows(layout: SlotLayout, group: Group, modes: tuple[int, ...] | None = None) -> bool:
    """Whether ``layout`` has ``group``'s family and a slot for each of its channels, and (given
    the model's ``modes``) whether its grid has points only on the axes the model's weights
    cover (a model trained in 1D has one mode in y and z: it cannot run on a 2D grid)."""
    family = get_family(group.family)
    if modes is not None and not covers(modes, group.grid):
        return False
    return group.family in layout.families and set(family.channel_names(group.grid.dim)) <= set(
        layout.slots
    )


def covers(modes: tuple[int, ...], grid) -> bool:
    """Whether weights with ``modes`` over ``(t, x, y, z)`` run on ``grid``: no axis after their
    half axis (:func:`~pdeladder.trainer.layers.spectral.half_axis`) has points."""
    shape = grid.space_time
    return all(n == 1 for n in shape[half_axis(tuple(modes)) + 1 :])


def check_out(out_url: str, store_url: str, checkpoint: str | Path, force: bool) -> None:
    """Make the prediction store's folder (:func:`~pdeladder.outputs.make_output`): never over
    or around the source store or the model; a previous prediction is replaced with ``force``,
    else completed (its groups refuse another job's predictions: :func:`target_group`)."""
    make_output(out_url, "predict", [store_url, checkpoint], force=force, resume=True, zarr=True)


def target_group(
    out: Store, source: Group, provenance: dict[str, Any], domain_ranks: int = 1
) -> Group:
    """The group of ``out`` that receives ``source``'s predictions: same stage, family, grid,
    sample count, storage and attributes, plus a ``prediction`` attribute (``provenance``).
    An appendable source gives a group of the size it has now. For ``domain_ranks`` writers,
    the x axis is chunked so that each writes whole chunks (:func:`x_cuts`)."""
    family = get_family(source.family)
    n = source.attrs["n_samples"]
    if n is None:  # appendable: as many samples as it holds now (an empty one stays appendable)
        n = source.n_samples or None
    compression = source.attrs["compression"]
    reserved = group_metadata(source.attrs["stage"], family, source.grid, n, None, compression)
    attrs = {k: v for k, v in source.attrs.items() if k not in reserved and k not in MUTABLE_ATTRS}
    attrs["prediction"] = provenance
    chunk_x = slab_chunk(source.grid.shape[0], domain_ranks) if domain_ranks > 1 else None
    return out.require_group(
        source.attrs["stage"],
        family,
        source.grid,
        n,
        attrs,
        compression=compression,
        chunk_x=chunk_x,
    )


def slab_tiling(grid, domain_ranks: int, padding: float) -> DomainTiling:
    """How ``domain_ranks`` writers split a group of ``grid``: x cut at the boundaries of its
    :func:`slab_chunk` chunks, so that each writes whole chunks."""
    x = grid.shape[0]
    edges = slabs(x, slab_chunk(x, domain_ranks), domain_ranks)
    return DomainTiling(x=domain_ranks, padding=padding, x_cuts=(0, *(hi for _, hi in edges)))


@torch.no_grad()
def predict_into(
    model: torch.nn.Module,
    processor: DataProcessor,
    source: Group,
    target: Group,
    indices: np.ndarray,
    records: dict[str, np.ndarray],
    provenance: dict[str, Any],
    slab: Slab | None = None,
    symmetrize: bool = False,
    refine: int = 0,
) -> None:
    """Predict the ok samples ``indices`` of ``source`` and write them at the same indices of
    ``target``.

    ``records``: the source's per-sample ``checksum`` ``(N,)``, ``params`` ``(N, P)``, ``seed``
    ``(N,)`` and ``provenance`` ``(N,)`` columns. Reads ``(B, T, C_f, X, Y, Z)`` fields, predicts
    ``(B, C_slots, T, X, Y, Z)``, keeps the inputs in that order and turns each sample back to
    the store's ``(T, C_f, X, Y, Z)`` only to write it. With a
    ``slab`` (one rank of the domain group ``slab.domain``, the model's transforms sharded over
    the group): reads, predicts and writes only the slab's x rows, then, once every rank's slab
    has landed, rank 0 commits each sample. ``symmetrize``:
    :func:`~pdeladder.trainer.inference.predict`'s. ``refine``: iterations of
    :func:`~pdeladder.trainer.refine.refine_batch` on each prediction (on the slab, over its
    domain group), recorded in each sample's provenance.
    """
    layout = processor.layout
    family = get_family(source.family)
    grid = source.grid
    start = time.perf_counter()
    if slab is None:
        fields = np.empty((len(indices), *source.sample_shape), np.float32)
        samples = [(source, int(i), int(records["checksum"][i])) for i in indices]
        read_samples(samples, out=list(fields))
    else:
        lo, hi = slab.lo[1], slab.hi[1]
        fields = np.stack([source.read_slab(int(i), "x", lo, hi) for i in indices])
    batch = make_batch(layout, source.family, grid, fields, records["params"][indices], solved=True)
    batch = processor.to_device(batch)
    slots = layout.slot_indices(family, grid.dim)
    pred = predict(model, processor, batch, slab, symmetrize)  # (B, C, T, X, Y, Z)
    given = processor.fields(batch)  # (B, C, T, X, Y, Z) physical
    refinement = {}
    if refine:
        pred, curves = refine_batch(pred, given, batch, layout, refine, slab=slab)
        (curve,) = curves.values()  # (B, refine + 1): one group, one family
        refinement = {
            k: {"steps": refine, "residual": [float(curve[k, 0]), float(curve[k, -1])]}
            for k in range(len(indices))
        }
    kept = written(pred[:, slots], given[:, slots], family, grid, processor.inside(batch))
    out = kept.movedim(1, 2).cpu().numpy()  # (B, T, C_f, X, Y, Z), the store's order
    share = (time.perf_counter() - start) / len(indices)
    if slab is not None:
        for k, i in enumerate(indices):
            target.write_slab(int(i), slab.lo[1], slab.hi[1], np.ascontiguousarray(out[k]))
        dist.barrier()  # every rank's slabs have landed
        if dist.get_rank() != 0:
            return
    for k, i in enumerate(indices):
        params = family.Params.from_vector(records["params"][i])
        solved = json.loads(records["provenance"][i] or "{}")
        prov = {**provenance, "source_index": int(i), "source_provenance": solved,
                "source_checksum": int(records["checksum"][i])}  # fmt: skip
        if refinement:
            prov["refinement"] = refinement[k]
        sample = Sample(
            source.family,
            None if slab is not None else np.ascontiguousarray(out[k], dtype=np.float32),
            grid,
            params,
            int(records["seed"][i]),
            SolveStats(wall_s=share),
            prov,
        )
        if slab is None:
            target.write(int(i), sample)
        else:
            target.commit(int(i), sample)


def written(
    pred: torch.Tensor,
    given: torch.Tensor,
    family: Family,
    grid: Grid,
    inside: torch.Tensor | None,
) -> torch.Tensor:
    """What a prediction store holds of a batch, ``(B, C_f, T, X, Y, Z)`` in ``family``'s
    channels: the ``given`` values of its inputs (input-role channels, and snapshot 0 of a time
    series), the prediction ``pred`` elsewhere, and 0 outside the domain ``inside``
    ``(B, 1, 1, X, Y, Z)`` (where given), as in the solver's data."""
    copied = torch.zeros(pred.shape[1:3], dtype=torch.bool)  # (C_f, T): given, not predicted
    copied[[c.role == "input" for c in family.channels_for(grid.dim)]] = True  # the inputs
    if grid.snapshots > 1:
        copied[:, 0] = True  # the initial condition too
    copied = copied[..., None, None, None].to(pred.device)
    if inside is not None:
        pred = torch.where(inside != 0, pred, 0.0)
    return torch.where(copied, given, pred)


def unpredicted(target: Group, indices: np.ndarray, checksums: np.ndarray) -> np.ndarray:
    """Those of the source's ok samples ``indices`` that ``target`` does not hold predictions
    of as they are now: not ok there, or predicted from a sample whose checksum (``checksums``,
    the source's ``(N,)``) has changed since, as when a store is regenerated between a kill
    and the rerun."""
    status, ok = target.status(), np.zeros(target.n_samples, bool)
    ok[indices] = True
    ok &= status == OK
    made = target.column("provenance", where=ok)
    return np.array(
        [i for i in indices
         if not ok[i] or json.loads(made[i] or "{}").get("source_checksum") != int(checksums[i])],
        dtype=np.int64,
    )  # fmt: skip


def copy_failure(source: Group, target: Group, index: int, records: dict[str, np.ndarray]) -> None:
    """Record sample ``index`` of ``target`` as failed, with the source's reason."""
    family = get_family(source.family)
    reason = f"failed in the source store: {records['reason'][index]}"
    sample = Sample(
        source.family,
        None,
        source.grid,
        family.Params.from_vector(records["params"][index]),
        int(records["seed"][index]),
        SolveStats(status="failed", reason=reason),
    )
    target.write(index, sample)


def predict_store(
    checkpoint: str | Path,
    store_url: str,
    out_url: str,
    groups: list[str] | None = None,
    *,
    force: bool = False,
    batch_size: int = 8,
    device: str = "cpu",
    progress: Progress | None = None,
    domain_ranks: int = 1,
    samples: dict[str, list[int]] | None = None,
    symmetrize: bool | None = None,
    refine: int = 0,
) -> dict[str, int]:
    """Write the predictions of the model in ``checkpoint`` for ``groups`` of ``store_url``
    (default: every group the model knows) into a new store at ``out_url``; returns the samples
    predicted per group. Bad input (no model there, an unknown group, an ``out_url`` over an
    input or holding anything but a prediction, more ``domain_ranks`` than cores or than a
    group's x axis allows) raises before anything is written. Into a previous prediction of the
    same job, without ``force``, it completes that one: the samples ok there are kept (an
    interrupted run resumes).

    ``domain_ranks > 1`` runs that many processes on gloo that split every sample along x: each
    reads, predicts and writes only its x slab (its spectral transforms summed over the group),
    and no process ever holds a whole sample.

    ``samples`` restricts a group to the sample indices it lists (the others stay missing in
    the prediction store), as ``evaluate`` does for the held-out samples.

    ``symmetrize``: write the model's mean over the box's symmetries
    (:func:`~pdeladder.trainer.inference.predict`; on x slabs too; default:
    :func:`~pdeladder.trainer.inference.symmetrized`).

    ``refine``: improve each prediction by that many iterations against its family's residual
    (:mod:`pdeladder.trainer.refine`; on x slabs with halos, no gather), recorded in the
    group's ``prediction`` attribute and each sample's provenance.
    """
    refine = check_steps(refine)
    if batch_size < 1:
        raise UserInputError(f"batch size must be positive, got {batch_size}")
    if not 1 <= domain_ranks <= (os.cpu_count() or 1):
        raise UserInputError(
            f"--domain-ranks {domain_ranks}: between 1 and this machine's {os.cpu_count()} cores"
        )
    model, meta = load_model(checkpoint, map_location=device)  # a bad device fails here
    layout = SlotLayout.from_json(meta["layout"])
    store = open_store(store_url)
    known = model_groups(store, layout, model.config.modes)
    if groups:
        available = store.groups()
        for path in groups:
            if path not in available:
                raise UserInputError(
                    f"{store_url}: no group {path!r}; groups: {', '.join(available)}"
                )
            if path in model_groups(store, layout) and path not in known:
                raise UserInputError(
                    f"{store_url}::{path}: a {store.group(path).grid.dim}D grid, which the "
                    f"model's modes {tuple(model.config.modes)} do not cover (trained on fewer "
                    "dimensions)"
                )
            if path not in known:
                raise UserInputError(
                    f"{store_url}::{path}: the model has no channels for this family and "
                    f"dimension (it knows {', '.join(layout.families)})"
                )
    paths = list(dict.fromkeys(groups)) if groups else known
    if not paths:
        raise UserInputError(f"{store_url}: no groups of the model's families {layout.families}")
    if domain_ranks > 1:
        for path in paths:  # the x cuts at chunk boundaries must leave every rank enough points
            grid = store.group(path).grid
            slab_tiling(grid, domain_ranks, model.config.padding).slab(grid.space_time, 0)
    check_out(out_url, store_url, checkpoint, force)
    out = open_store(out_url, "a")
    provenance = {
        "checkpoint": str(Path(checkpoint).absolute()),
        "model": model.name,
        "checkpoint_stage": meta.get("stage"),
        "checkpoint_step": meta.get("step"),
        "source_store": store_url,
        "domain_ranks": domain_ranks,
        "refine_steps": refine,
    }
    targets, pending = {}, {}
    for path in paths:
        source = store.group(path)
        sym = symmetrized(meta, symmetrize, source.grid.dim)
        targets[path] = target_group(
            out, source, {**provenance, "source_group": path, "symmetrized": sym}, domain_ranks
        )
        status = chosen(source.status(), (samples or {}).get(path))
        done = targets[path].status()  # a resumed prediction's samples are kept
        failed = np.flatnonzero((status == FAILED) & (done != FAILED))
        if len(failed):
            records = {name: source.column(name) for name in ("params", "seed", "reason")}
            for i in failed:
                copy_failure(source, targets[path], int(i), records)
        todo = unpredicted(targets[path], np.flatnonzero(status == OK), source.checksums(status))
        for i in todo[done[todo] == OK]:  # predicted from a sample changed since: again
            targets[path].discard(int(i))
        pending[path] = (len(failed), len(todo))
    job = {
        "checkpoint": str(checkpoint),
        "store": store_url,
        "out": out_url,
        "paths": paths,
        "batch_size": batch_size,
        "device": device,
        "provenance": provenance,
        "symmetrize": symmetrize,
        "samples": samples or {},
    }
    bars = {
        p: progress(p, f + n) if progress else (lambda _: None) for p, (f, n) in pending.items()
    }
    for path, (failed, _) in pending.items():
        bars[path](failed)
    if domain_ranks == 1:
        predict_groups(job, 0, advance=lambda path, n: bars[path](n), loaded=(model, meta))
    else:
        run_ranks(job, domain_ranks, {p: (targets[p], n) for p, (_, n) in pending.items()}, bars)
    for target in targets.values():
        target.update_normalisation()
    return {path: n for path, (_, n) in pending.items()}


def chosen(status: np.ndarray, indices: list[int] | None) -> np.ndarray:
    """A group's ``status`` column with the samples not in ``indices`` (when given) marked
    missing: the samples a prediction job leaves out."""
    if indices is None:
        return status
    keep = np.zeros(len(status), bool)
    keep[np.asarray(indices, dtype=np.int64)] = True
    return np.where(keep, status, MISSING)


def predict_groups(
    job: dict[str, Any],
    rank: int,
    domain: DomainGroup | None = None,
    advance=None,
    loaded: tuple[torch.nn.Module, dict[str, Any]] | None = None,
) -> None:
    """Predict every ok sample of the job's groups into their target groups (made already), as
    the whole job (``domain`` None) or as rank ``rank`` of ``domain``, on x slabs; with the
    ``(model, metadata)`` already ``loaded`` from the job's checkpoint, or loading them."""
    model, meta = loaded or load_model(job["checkpoint"], map_location=job["device"])
    split_samples(model.to(job["device"]).eval(), domain)
    processor = DataProcessor(SlotLayout.from_json(meta["layout"]), job["device"])
    store, out = open_store(job["store"]), open_store(job["out"], "a")
    for path in job["paths"]:
        source, target = store.group(path), out.group(path)
        sym = symmetrized(meta, job["symmetrize"], source.grid.dim)
        provenance = {**job["provenance"], "source_group": path, "symmetrized": sym}
        status = source.status()
        records = {name: source.column(name) for name in ("params", "seed", "provenance")}
        records["checksum"] = source.checksums(status)
        slab = None
        if domain is not None:
            grid = source.grid
            tiling = slab_tiling(grid, domain.size, model.config.padding)
            # the group tiles this group's samples as its writers cut them (the residual's
            # halos check every rank's part)
            slab = tiling.slab(grid.space_time, rank).held_by(replace(domain, tiling=tiling))
        ok = np.flatnonzero(chosen(status, job["samples"].get(path)) == OK)
        ok = unpredicted(target, ok, records["checksum"])  # a resumed prediction's are kept
        for start in range(0, len(ok), job["batch_size"]):
            part = ok[start : start + job["batch_size"]]
            predict_into(
                model, processor, source, target, part, records, provenance, slab,
                symmetrize=sym, refine=job["provenance"]["refine_steps"],
            )  # fmt: skip
            if advance is not None:
                advance(path, len(part))


def run_ranks(job: dict[str, Any], k: int, targets: dict[str, tuple[Group, int]], bars) -> None:
    """Run the job on ``k`` local processes (gloo, a file rendezvous), showing the committed
    samples as they land; raises PdeladderError naming the first rank that failed (the samples
    it had not committed stay missing)."""
    with tempfile.TemporaryDirectory(prefix="pdeladder-predict-") as folder:
        spec = Path(folder, "job.json")
        spec.write_text(json.dumps(job))
        init = f"file://{folder}/rendezvous"
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        local_gloo_env(env)  # every rank is on this machine: gloo on loopback
        command = [sys.executable, "-m", "pdeladder.trainer.predict", str(spec), init, str(k)]
        logs = [Path(folder, f"rank{r}.err") for r in range(k)]  # files: a pipe could fill up
        procs = []
        for r, log in enumerate(logs):
            with log.open("w") as err:
                procs.append(subprocess.Popen(tied([*command, str(r)]), env=env, stderr=err))
        shown = {path: int((t.status() == OK).sum()) for path, (t, _) in targets.items()}
        while any(p.poll() is None for p in procs):
            time.sleep(0.5)
            for path, (target, _) in targets.items():
                done = int((target.status() == OK).sum())
                bars[path](done - shown[path])
                shown[path] = done
        if failed := [r for r, p in enumerate(procs) if p.returncode]:
            text = logs[failed[0]].read_text().strip()[-2000:]
            raise PdeladderError(f"predict: rank {failed[0]} of {k} failed: {text}")
        for path, (target, _) in targets.items():
            bars[path](int((target.status() == OK).sum()) - shown[path])


def main() -> None:
    """One rank of :func:`run_ranks`: ``python -m pdeladder.trainer.predict JOB INIT K RANK``."""
    job_file, init, k, rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=k)
    try:
        domain = DomainGroup(None, DomainTiling(x=k), tuple(range(k)), rank)
        predict_groups(json.loads(Path(job_file).read_text()), rank, domain)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
