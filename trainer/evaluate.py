"""Evaluation of a trained model on a store's groups: accuracy, physics and super-resolution.

For every group of a family the model knows (the held-out samples of the groups it trained on,
all samples of groups at other resolutions, which test zero-shot super-resolution when finer):

- nRMSE per channel (relative L2 with trapezoidal weights over space-time, physical units, mean
  over samples), beside the same nRMSE of the trivial baseline on the same samples and the ratio
  model / baseline (below 1: the model beats it); the baseline is persistence
  ``u(t) = u(0)``, or for steady groups a mean field (:mod:`pdeladder.trainer.baselines`);
- RMSE in low / mid / high spatial-frequency bands (thirds of the resolved radial wavenumbers);
- conservation error: change of the spatial mean over time, prediction against truth, relative
  to the truth's spread;
- boundary error: RMSE on the boundary points, relative to the truth's RMS there;
- the relative PDE residual of the prediction and of the solver data (its floor).

The nRMSE is pdeladder's one definition, :func:`pdeladder.trainer.metrics.nrmse` (the training
validation's too). With ``metrics`` ``pdebench``, ``well`` or ``all``, each group's report also
holds the other conventions under their own names (:mod:`pdeladder.trainer.metrics`), for the
model and its baseline alike: ``pdebench`` (nRMSE, RMSE, cRMSE, bRMSE, fRMSE low/mid/high per
channel) and ``well`` (VRMSE per channel).

The parts live apart: the metrics in :mod:`pdeladder.trainer.metrics`, the baselines in
:mod:`pdeladder.trainer.baselines`, the predictions in :mod:`pdeladder.trainer.inference`, and
``report.json``, ``report.md`` and the PNGs in :mod:`pdeladder.trainer.report` and
:mod:`pdeladder.trainer.figures`; this module chooses the groups and samples, runs them through
those and sums the families' scores.

An evaluation written to a folder resumes: each group's report is recorded there as the group
is scored (:class:`Ledger`), with the samples it scored, so a rerun of the same job (model,
store and settings) after a kill scores only the groups not yet recorded (and, on domain
ranks, predicts only the samples not yet in ``predictions.zarr``), ending with the report an
uninterrupted run writes.
"""

import hashlib
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from pdeladder.curriculum.spec import HELD_OUT
from pdeladder.dataset.catalog import Catalog, select_groups
from pdeladder.dataset.format import OK, group_key
from pdeladder.dataset.group import Group
from pdeladder.dataset.ledger import Ledger
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError
from pdeladder.outputs import check_output, make_output
from pdeladder.trainer.baselines import (
    baseline_name,
    baseline_prediction,
    beats,
    mean_field,
    ratio,
)
from pdeladder.trainer.figures import plot_group
from pdeladder.trainer.inference import predict, refined, stored_prediction, symmetrized
from pdeladder.trainer.metrics import (
    CONVENTIONS,
    band_rmse,
    boundary_error,
    channel_nrmse,
    conservation_error,
    convention_scores,
)
from pdeladder.trainer.models.checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_model
from pdeladder.trainer.predict import knows, predict_store
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.refine import check_steps
from pdeladder.trainer.report import figure_file, write_report
from pdeladder.trainer.training.validation import sample_scores

#: Scores averaged over a family's groups, weighted by their samples.
FAMILY_SCORES = ("nrmse", "baseline_nrmse", "residual")
#: Samples of a group evaluated (its first held-out ones).
EVALUATED = 16
#: ``progress(samples)``, called with the samples to score once the groups are chosen, returns
#: the function called with a group's path and its samples as they are scored (a CLI's bar).
ScoringProgress = Callable[[int], Callable[[str, int], None]]


class Scored(NamedTuple):
    """A group chosen for scoring: whether the model ``seen`` it in training, its ``data``, the
    samples of its mean-field baseline and the ``evaluated`` samples (indices)."""

    group: Group
    seen: bool
    data: StoreDataset
    baseline_samples: np.ndarray
    evaluated: np.ndarray


def group_report(
    pred: torch.Tensor,
    truth: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    baseline: torch.Tensor,
    conventions: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Metrics of one batch: ``pred``, ``truth`` (the batch's fields) and ``baseline`` are
    ``(B, C, T, X, Y, Z)`` physical; ``conventions``: the other metric conventions to add
    (:data:`~pdeladder.trainer.metrics.CONVENTIONS`). Every score counts the points inside the
    samples' domain (:meth:`~pdeladder.dataset.slots.SlotLayout.inside`) only."""
    grid = batch["grid"]
    slots = [i for i, p in enumerate(batch["predicted"][0].tolist()) if p]
    inside = layout.inside(batch)  # (B, 1, 1, X, Y, Z) or None
    one = None if inside is None else inside[:, 0]  # (B, 1, X, Y, Z), beside one channel
    _, residual = sample_scores(pred, truth, batch, layout)
    _, truth_residual = sample_scores(truth, truth, batch, layout)
    scores = {
        who: channel_nrmse(p, truth, batch["predicted"], inside)
        for who, p in (("model", pred), ("baseline", baseline))
    }  # (B, C) each
    per_channel = {
        who: {layout.slots[s]: float(e[:, s].mean()) for s in slots} for who, e in scores.items()
    }
    bands, conservation, boundary = {}, {}, {}
    for s in slots:
        p, t = pred[:, s], truth[:, s]  # (B, T, X, Y, Z)
        name = layout.slots[s]
        rmse = band_rmse(p - t, grid.dim, one)
        bands[name] = dict(zip(("low", "mid", "high"), rmse, strict=True))
        conservation[name] = conservation_error(p, t, one)
        boundary[name] = boundary_error(p, t, grid.dim, one)
    group = {who: float(e[:, slots].mean()) for who, e in scores.items()}
    names = [layout.slots[s] for s in slots]
    others = {
        who: convention_scores(p, truth, slots, names, grid.dim, conventions, inside)
        for who, p in (("model", pred), ("baseline", baseline))
    }
    extra = {c: {who: others[who][c] for who in others} for c in conventions}
    return {
        "samples": truth.shape[0],
        "nrmse": group["model"],
        "nrmse_per_channel": per_channel["model"],
        "baseline_nrmse": group["baseline"],
        "baseline_nrmse_per_channel": per_channel["baseline"],
        "ratio": ratio(group["model"], group["baseline"]),
        "ratio_per_channel": {
            c: ratio(v, per_channel["baseline"][c]) for c, v in per_channel["model"].items()
        },
        "beats_baseline": beats(group["model"], group["baseline"]),
        "rmse_bands": bands,
        "conservation_error": conservation,
        "boundary_error": boundary,
        "residual": float(residual.mean()),
        "residual_of_data": float(truth_residual.mean()),
        **extra,
    }


def evaluate_checkpoint(
    checkpoint: str | Path,
    store_url: str,
    out_dir: str | Path | None = None,
    held_out: float | None = None,
    metrics: str = "ours",
    domain_ranks: int = 1,
    symmetrize: bool | None = None,
    refine: int | str = 0,
    groups: list[str] | None = None,
    progress: ScoringProgress | None = None,
) -> dict[str, Any]:
    """Evaluate the model in ``checkpoint`` on ``store_url``; returns the report (per group and
    per family) and writes it under ``out_dir`` when given. ``metrics``: a key of
    :data:`CONVENTIONS` (``ours``, ``pdebench``, ``well``, ``all``).

    ``out_dir`` is an evaluation's folder (:mod:`pdeladder.outputs`: never over or around the
    store or the model; a non-empty folder that is not an evaluation is refused before
    anything runs). An evaluation of the same job there, interrupted, is completed: its
    recorded groups are kept (:class:`Ledger`) and the report is the one an uninterrupted run
    writes; another job's (another model, store or setting) is replaced.

    ``domain_ranks > 1``: the model runs on that many processes, each on an x slab of every
    sample (:func:`~pdeladder.trainer.predict.predict_store` into ``out_dir/predictions.zarr``,
    or a temporary store), and the scores are computed from the stored predictions: one process
    then holds the evaluated samples' fields, never the model's activations on them.

    ``symmetrize``: score the model's mean over the box's symmetries
    (:func:`~pdeladder.trainer.inference.predict`; default, None:
    :func:`~pdeladder.trainer.inference.symmetrized`, by the group's dimension); the report
    holds what was asked (``symmetrize``), each group's report whether it was (``symmetrized``).

    ``refine``: score the predictions improved by that many iterations against each family's
    residual (:mod:`pdeladder.trainer.refine`); each group's report then also holds the
    unrefined scores (``unrefined``) and the refinement's nRMSE after every iteration and its
    time per sample (``refinement``; the curve only in one process).

    ``groups``: patterns of the group paths to score (``fnmatch``, e.g. ``refine/heat/*``;
    default: every group the model knows); one that matches no group is refused.

    ``held_out``: the share of each trained group's samples held out of training (its
    curriculum's ``training.held_out``; default: the model's metadata ``held_out``, else
    :data:`~pdeladder.curriculum.spec.HELD_OUT`); only those are scored of the groups it trained
    on.

    ``progress``: told the samples to score, then each group's as they are (with
    ``domain_ranks > 1``, as they are predicted)."""
    refine = check_steps(refine)
    if held_out is not None and not 0 < held_out < 1:
        raise UserInputError(f"held-out share {held_out:g}: must lie in (0, 1)")
    if metrics not in CONVENTIONS:
        raise UserInputError(f"--metrics {metrics!r}: choose one of {', '.join(CONVENTIONS)}")
    if out_dir is not None:  # before the evaluation, not after it; touches nothing
        check_output(out_dir, COMMAND, [store_url, checkpoint], resume=True)
    model, meta = load_model(checkpoint)
    held_out = meta.get("held_out", HELD_OUT) if held_out is None else held_out
    model.eval()
    layout = SlotLayout.from_json(meta["layout"])
    processor = DataProcessor(layout)
    store = open_store(store_url)
    trained = set(meta.get("paths", []))
    trained_dims = {group_key(p)[1:3] for p in trained}  # (family, dim) at any resolution
    chosen: dict[str, Scored] = {}
    for path in select_groups(store, groups):
        g = store.group(path)
        if not knows(layout, g, model.config.modes):
            continue  # a family, or a dimension of it, the model has no channel slots for
        seen = path in trained
        catalog = Catalog.build(
            store_url, groups=[path], layout=layout, held_out=held_out if seen else 1.0
        )
        split = catalog.groups[path]
        test = split.test if seen else np.concatenate([split.train, split.test])
        if len(test):
            data = StoreDataset(catalog, batch_size=8)
            chosen[path] = Scored(g, seen, data, split.train if seen else test, test[:EVALUATED])
    if not chosen:
        raise UserInputError(f"{store_url}: no groups of the model's families {layout.families}")
    ledger = None
    if out_dir is not None:
        settings = dict(
            metrics=metrics, held_out=held_out, domain_ranks=domain_ranks, refine=refine
        )
        job = evaluation_job(checkpoint, store_url, symmetrize=symmetrize, **settings)
        previous = make_output(out_dir, COMMAND, [store_url, checkpoint], resume=True)
        ledger = Ledger.open(Path(out_dir, LEDGER), job, previous)
    recorded = {
        path: done["report"]
        for path, c in chosen.items()
        if (done := ledger.done(path, c.group, c.evaluated) if ledger else None) is not None
    }
    total = sum(len(c.evaluated) for c in chosen.values())
    advance = progress(total) if progress else lambda path, samples: None
    for path in recorded:
        advance(path, len(chosen[path].evaluated))
    pending = [p for p in chosen if p not in recorded]
    with ExitStack() as stack:
        if domain_ranks > 1 and pending:
            if ledger is not None:
                pred_url = str(Path(out_dir, "predictions.zarr"))
            else:
                pred_url = str(Path(stack.enter_context(tempfile.TemporaryDirectory()), "p.zarr"))
            samples = {p: chosen[p].evaluated.tolist() for p in pending}
            # kept unless of another job, or a recorded group's samples changed since
            stale = ledger is not None and any(p in ledger.state["groups"] for p in pending)
            resumed = ledger is not None and ledger.resumed and not stale
            for path in pending if resumed else []:  # predicted before a kill: kept
                advance(path, predicted(pred_url, path, samples[path]))
            job = dict(
                domain_ranks=domain_ranks, samples=samples, symmetrize=symmetrize, force=not resumed
            )
            started = time.perf_counter()
            shown = dict(progress=lambda path, _: partial(advance, path))
            written = predict_store(
                checkpoint, store_url, pred_url, pending, refine=refine, **shown, **job
            )
            seconds = time.perf_counter() - started
            if refine:
                plain_url = str(Path(stack.enter_context(tempfile.TemporaryDirectory()), "p.zarr"))
                started = time.perf_counter()
                predict_store(checkpoint, store_url, plain_url, pending, **{**job, "force": True})
                plain = time.perf_counter() - started  # over every sample of the pending groups
                per_sample = refine_seconds(seconds, plain, sum(written.values()), samples, ledger)
        groups = dict(recorded)
        for path, (g, seen, data, train, test) in chosen.items():
            if path in recorded:
                continue  # scored before a kill: its report is kept
            batch = data.load(path, test)
            truth = processor.fields(batch)
            refinement = None
            if domain_ranks > 1:
                pred = stored_prediction(processor, pred_url, path, test)
                if refine:
                    plain = stored_prediction(processor, plain_url, path, test)
                    refinement = {"steps": refine, "seconds_per_sample": per_sample}
            else:
                sym = symmetrized(meta, symmetrize, g.grid.dim)
                pred = predict(model, processor, batch, symmetrize=sym)
                if refine:
                    plain, (pred, refinement) = pred, refined(pred, truth, batch, layout, refine)
            steady = g.grid.snapshots == 1
            mean = mean_field(processor, data, path, train) if steady else None
            report = group_report(
                pred, truth, batch, layout, baseline_prediction(truth, mean), CONVENTIONS[metrics]
            )
            report["baseline"] = baseline_name(steady, seen)
            if refinement is not None:
                unrefined = group_report(
                    plain, truth, batch, layout, baseline_prediction(truth, mean)
                )
                report["unrefined"] = {k: unrefined[k] for k in ("nrmse", "ratio", "residual")}
                report["refinement"] = refinement
            other = "other_resolution" if (g.family, g.grid.dim) in trained_dims else "unseen"
            report["kind"] = "held_out" if seen else other
            report["symmetrized"] = symmetrized(meta, symmetrize, g.grid.dim)
            groups[path] = report
            if ledger is not None:  # its figure, then its report: recorded once both landed
                plot_group(path, pred, truth, batch, layout, figure_file(Path(out_dir), path))
                ledger.record(path, g, test, report=report)
            if domain_ranks == 1:
                advance(path, len(test))
    groups = {path: groups[path] for path in chosen}  # the store's order, resumed or not
    report = {
        "checkpoint": str(checkpoint),
        "store": store_url,
        "metrics": metrics,
        "symmetrize": symmetrize,
        "refine_steps": refine,
        "families": family_scores(groups, {p: c.group.family for p, c in chosen.items()}),
        "groups": groups,
    }
    if out_dir is not None:
        write_report(report, Path(out_dir))
    return report


#: The command name an evaluation's folder is marked with (:mod:`pdeladder.outputs`).
COMMAND = "evaluate"
#: The file of an evaluation's folder that records each group's report as it is scored.
LEDGER = "scored.json"


def evaluation_job(checkpoint: str | Path, store_url: str, **settings: Any) -> dict[str, Any]:
    """What makes two evaluations the same job: the model (its folder and a digest of its
    files, which a retrained model at the same place changes), the store and the ``settings``
    (metrics, held-out share, domain ranks, refinement, symmetrization)."""
    digest = hashlib.sha256()
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        with open(Path(checkpoint, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return {
        "checkpoint": str(Path(checkpoint).absolute()),
        "model_sha256": digest.hexdigest(),
        "store": store_url,
        **settings,
    }


def predicted(url: str, path: str, samples: list[int]) -> int:
    """How many of ``samples`` the prediction store at ``url`` holds (ok) in group ``path``."""
    if not Path(url).exists() or path not in (store := open_store(url)).groups():
        return 0  # killed before this group's predictions began
    status = store.group(path).status()
    return int((status[[i for i in samples if i < len(status)]] == OK).sum())


def refine_seconds(
    refined: float,
    plain: float,
    written: int,
    samples: dict[str, list[int]],
    ledger: Ledger | None,
) -> float:
    """Seconds per sample that refinement adds on domain ranks: ``refined`` seconds predicted
    and refined the ``written`` samples, ``plain`` seconds predicted all ``samples``. A resumed
    run that wrote none takes the record's (``nan`` without one)."""
    if written:
        share = refined / written - plain / sum(map(len, samples.values()))
        if ledger is not None:
            ledger.state["refine_seconds_per_sample"] = share
            ledger.save()
        return share
    return ledger.state.get("refine_seconds_per_sample", float("nan")) if ledger else float("nan")


def family_scores(
    groups: dict[str, dict[str, Any]], family_of: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Each family's :data:`FAMILY_SCORES` (and ``unrefined_nrmse`` where refined): its groups'
    reports (by path; ``family_of``: each path's family) averaged, weighted by their samples,
    with the ratio to the baseline and the verdict."""
    families: dict[str, dict[str, Any]] = {}
    for path, r in groups.items():
        f = families.setdefault(
            family_of[path], {**dict.fromkeys(FAMILY_SCORES, 0.0), "samples": 0}
        )
        for key in FAMILY_SCORES:
            f[key] += r[key] * r["samples"]
        f["samples"] += r["samples"]
        if "unrefined" in r:
            f["unrefined_nrmse"] = (
                f.get("unrefined_nrmse", 0.0) + r["unrefined"]["nrmse"] * r["samples"]
            )
    for f in families.values():
        for key in (*FAMILY_SCORES, "unrefined_nrmse"):
            if key in f:
                f[key] /= f["samples"]
        f["ratio"] = ratio(f["nrmse"], f["baseline_nrmse"])
        f["beats_baseline"] = beats(f["nrmse"], f["baseline_nrmse"])
    return families
