"""Predicted rollouts of a model, written into a store of the same format as its input.

``predict_store(checkpoint, store_url, out_url)`` makes, for every group the model knows (or the
groups named), a group of the same path, family, grid, sample count and attributes in the store
at ``out_url``, whose ``fields`` are the model's prediction from each sample's inputs: its
initial state, its input-role channels (a permeability, a velocity field) and its parameters.
Those inputs are copied, not predicted: input-role channels at every snapshot and, for
time-dependent groups, snapshot 0; every other value is the model's. Parameters, seeds and
coordinates are the source's; each sample's provenance names the checkpoint and the source
sample. A failed source sample is recorded as failed (with its reason), a missing one stays
missing. The store's own writer writes every sample (status ok after its data), so the result
is read by xarray, ``store plot``, ``store verify`` and ``evaluate`` like solver data.

Samples stream batch by batch: one batch of source fields and its prediction are in memory at
a time. :func:`predict_into` is the one step that predicts and writes a batch.
"""

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import torch

from pdeladder.dataset.format import FAILED, MUTABLE_ATTRS, OK
from pdeladder.dataset.store import Group, Store, group_metadata, open_store, read_samples
from pdeladder.errors import UserInputError
from pdeladder.solvers.family import Sample, SolveStats
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.training.data import make_batch
from pdeladder.trainer.training.layout import SlotLayout
from pdeladder.trainer.training.processor import DataProcessor
from pdeladder.trainer.training.validation import predict

#: ``progress(group path, samples)`` returns the function called with the number of samples
#: each batch wrote (the CLI draws a bar with it).
Progress = Callable[[str, int], Callable[[int], None]]


def model_groups(store: Store, layout: SlotLayout) -> list[str]:
    """The groups of ``store`` the model of ``layout`` has channel slots for (family and dim)."""
    return [p for p in store.groups() if knows(layout, store.group(p))]


def knows(layout: SlotLayout, group: Group) -> bool:
    """Whether ``layout`` has ``group``'s family and a slot for each of its channels."""
    family = get_family(group.family)
    return group.family in layout.families and set(family.channel_names(group.grid.dim)) <= set(
        layout.slots
    )


def check_out(out_url: str, store_url: str, force: bool) -> None:
    """Refuse to write into the source store, or over a non-empty ``out_url`` unless ``force``
    (which removes what is there)."""
    fs, path = fsspec.core.url_to_fs(out_url)
    source_fs, source = fsspec.core.url_to_fs(store_url)
    if fs.unstrip_protocol(path) == source_fs.unstrip_protocol(source):
        raise UserInputError(f"{out_url}: is the input store; predict into another one")
    if fs.exists(path) and (fs.isfile(path) or fs.ls(path)):
        if not force:
            raise UserInputError(f"{out_url}: exists and is not empty; pass --force to replace it")
        fs.rm(path, recursive=True)


def target_group(out: Store, source: Group, provenance: dict[str, Any]) -> Group:
    """The group of ``out`` that receives ``source``'s predictions: same stage, family, grid,
    sample count, storage and attributes, plus a ``prediction`` attribute (``provenance``).
    An appendable source gives a group of the size it has now."""
    family = get_family(source.family)
    n = source.attrs["n_samples"]
    if n is None:  # appendable: as many samples as it holds now (an empty one stays appendable)
        n = source.n_samples or None
    compression = source.attrs["compression"]
    reserved = group_metadata(source.attrs["stage"], family, source.grid, n, None, compression)
    attrs = {k: v for k, v in source.attrs.items() if k not in reserved and k not in MUTABLE_ATTRS}
    attrs["prediction"] = provenance
    return out.require_group(
        source.attrs["stage"], family, source.grid, n, attrs, compression=compression
    )


@torch.no_grad()
def predict_into(
    model: torch.nn.Module,
    processor: DataProcessor,
    source: Group,
    target: Group,
    indices: np.ndarray,
    records: dict[str, np.ndarray],
    provenance: dict[str, Any],
) -> None:
    """Predict the ok samples ``indices`` of ``source`` and write them at the same indices of
    ``target``.

    ``records``: the source's per-sample ``checksum`` ``(N,)``, ``params`` ``(N, P)``, ``seed``
    ``(N,)`` and ``provenance`` ``(N,)`` columns. Reads ``(B, T, C_f, X, Y, Z)`` fields, predicts
    ``(B, C_slots, T, X, Y, Z)`` and writes each sample's ``(T, C_f, X, Y, Z)``.
    """
    layout = processor.layout
    family = get_family(source.family)
    grid = source.grid
    start = time.perf_counter()
    fields = np.empty((len(indices), *source.sample_shape), np.float32)
    read_samples([(source, int(i), int(records["checksum"][i])) for i in indices], out=list(fields))
    batch = make_batch(layout, source.family, grid, fields, records["params"][indices], True)
    pred = predict(model, processor, processor.to_device(batch))
    out = pred[:, layout.slot_indices(family, grid.dim)].movedim(1, 2).cpu().numpy()
    given = [c.role == "input" for c in family.channels_for(grid.dim)]
    out[:, :, given] = fields[:, :, given]  # inputs are given, not predicted
    if grid.snapshots > 1:
        out[:, 0] = fields[:, 0]  # the initial condition too
    share = (time.perf_counter() - start) / len(indices)
    for k, i in enumerate(indices):
        params = family.Params.from_vector(records["params"][i])
        solved = json.loads(records["provenance"][i] or "{}")
        prov = {**provenance, "source_index": int(i), "source_provenance": solved}
        sample = Sample(
            source.family,
            np.ascontiguousarray(out[k], dtype=np.float32),
            grid,
            params,
            int(records["seed"][i]),
            SolveStats(wall_s=share),
            prov,
        )
        target.write(int(i), sample)


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
) -> dict[str, int]:
    """Write the predictions of the model in ``checkpoint`` for ``groups`` of ``store_url``
    (default: every group the model knows) into a new store at ``out_url``; returns the samples
    predicted per group. Bad input (no model there, an unknown group, a non-empty ``out_url``
    without ``force``) raises before anything is written."""
    if batch_size < 1:
        raise UserInputError(f"batch size must be positive, got {batch_size}")
    model, meta = load_model(checkpoint, map_location=device)
    model.to(device).eval()
    layout = SlotLayout.from_json(meta["layout"])
    processor = DataProcessor(layout, device)
    store = open_store(store_url)
    known = model_groups(store, layout)
    if groups:
        available = store.groups()
        for path in groups:
            if path not in available:
                raise UserInputError(
                    f"{store_url}: no group {path!r}; groups: {', '.join(available)}"
                )
            if path not in known:
                raise UserInputError(
                    f"{store_url}::{path}: the model has no channels for this family and "
                    f"dimension (it knows {', '.join(layout.families)})"
                )
    paths = list(dict.fromkeys(groups)) if groups else known
    if not paths:
        raise UserInputError(f"{store_url}: no groups of the model's families {layout.families}")
    check_out(out_url, store_url, force)
    out = open_store(out_url, "a")
    provenance = {
        "checkpoint": str(Path(checkpoint).absolute()),
        "model": model.name,
        "checkpoint_stage": meta.get("stage"),
        "checkpoint_step": meta.get("step"),
        "source_store": store_url,
    }
    written = {}
    for path in paths:
        source = store.group(path)
        group_prov = {**provenance, "source_group": path}
        target = target_group(out, source, group_prov)
        status = source.status()
        records = {name: source.column(name) for name in ("params", "seed", "provenance")}
        records["checksum"] = source.checksums(status)
        ok = np.flatnonzero(status == OK)
        failed = np.flatnonzero(status == FAILED)
        if len(failed):
            records["reason"] = source.column("reason")
        advance = progress(path, len(ok) + len(failed)) if progress else lambda _: None
        for i in failed:
            copy_failure(source, target, int(i), records)
        advance(len(failed))
        for start in range(0, len(ok), batch_size):
            part = ok[start : start + batch_size]
            predict_into(model, processor, source, target, part, records, group_prov)
            advance(len(part))
        target.update_stats()
        written[path] = len(ok)
    return written
