"""The curriculum's claims, measured (issue 14, item 4; issue 31, items 1 and 3 c1), in one run
on the same solved data, over several seeds.

The quick-start's four 2D families (heat, Darcy, Burgers, advection-diffusion) with the
quick-start's parameter ranges, model and training settings (examples/quickstart.yaml: stage
``plane`` at 17² for ``coarse``, stage ``refine`` at 33² for ``fine``), solved once into one
store with ``materialize`` (curriculum seed 20240601); every variant is trained with
``train_curriculum`` (one worker, in process) and scored with ``evaluate_checkpoint`` on the
same held-out samples (the last ``--held-out`` of each group, at most 16), each nRMSE beside
its trivial baseline (persistence ``u(t) = u(0)``; steady Darcy: the training samples' mean
field).

**Seeds.** Every trained variant runs once per seed (``--seeds``, 20240601, 20240602, ...):
the curriculum's ``seed`` sets the model's initialisation, the batch order, the augmentation
and the unsolved draws; neuraloperator's FNO takes it for its initialisation and its data
order. The solved data and the held-out samples are the same for every seed. Each arm is
printed as mean ± standard error over the seeds (SE = std(ddof=1) / sqrt(n)), and each claim
is judged on the per-seed paired differences between its arms: **met** when their mean is in
the claim's favour by more than 2 SE of the paired difference, **missed** when it is against
it by more than 2 SE, else **no difference measured**. Where a claim has a threshold (c1's
20 %, d's 1.2x) the difference is taken to the threshold.

a. **Universal vs specialists (issue 31, item 2).** One model over the F = 4 families for
   ``--steps`` steps on ``coarse``, against one model per family in two settings.
   (i) *Sharing*, every family given as many batches (steps / F) in both arms: specialists of
   1/F the parameters (width / sqrt(F): the spectral weights, which dominate, grow as width²;
   the totals are then the universal model's), *full* specialists of the universal model's
   width, and neuraloperator's FNO per family of that width (the same kept frequencies, inputs
   and normalised targets as ours; its own ``Trainer``, AdamW at our learning rate with cosine
   decay per epoch, relative L2 loss; whole epochs). Target: the universal model no worse than
   the best of them (by its mean) on every family: missed only where it is higher beyond 2 SE.
   (ii) *The strongest test*: full specialists trained for as many steps as the universal model
   (F times its compute), reported with the gap; beside them the universal model given the same
   compute (F times its steps), which says whether steps per family close that gap, and the
   universal model given F times its steps and its parameters (width x sqrt(F): as many as the
   F specialists together), which says whether capacity closes what steps leave.
   ``--a-arms`` runs some of a.'s arms (";"-separated: the names hold commas; the universal
   model always).
b. **Curriculum vs shuffled.** ``coarse`` (``--steps``) then ``fine`` (``--fine-steps``, warm
   start), against one run of ``--steps + --fine-steps`` steps on the same groups mixed from
   step 0 (``fine`` with ``training.replay: [coarse]``: exactly the curriculum's samples and
   held-out split). Target: curriculum below shuffled on ``fine``'s held-out nRMSE (mean over
   the families, paired per seed).
c. **Self-improvement with few data (issue 31's c1).** ``--few`` solved samples per family at
   17² (all trained on), three arms at ``--few-steps + --si-steps`` steps each: *data only*;
   *self-improvement*: ``--few-steps`` data steps then ``--si-steps`` residual steps on
   ``--si-samples`` unsolved draws per family (the quick-start's self-improvement weights:
   residual 0.1, data anchor 1.0); *self-improvement + targets*: the same phase, each draw also
   fitted to its residual's minimiser (``refine_steps: --refine-steps``: Gauss–Newton from its
   initial state, converged; ``target_weight: 1.0``). Scored on ``coarse``'s samples (same ranges,
   draws the few-sample models never saw). Target (c1), per self-improvement arm: mean nRMSE
   over the families at least 20 % lower than data only (the per-seed reduction, 2 SE beyond
   20 %) and no family worse than data only (beyond 2 SE). Beside them the bound of any
   self-improvement: *all solved*, data only on as many solved samples as the few plus the
   unsolved draws (``--few`` + ``--si-samples`` per family), a target no worse than a
   solve for every draw.
c2. **Beyond the quality of the data (issue 31's c2).** The solved data at 17² only (``coarse``),
   and the self-improvement phase's draws at 65² (``self_improvement.resolution``, four times
   the cells per axis): *coarse data only* (``--steps + --si-steps`` data steps); *fine
   residual*: ``--steps`` data steps then ``--si-steps`` of the phase (the quick-start's
   weights) on 65² draws; *fine residual + targets*: the same with each draw's residual
   minimiser as its target (Gauss–Newton from its initial state, converged). Scored at 65² on the last half of stage ``c2`` (solved at 65², never trained
   on), beside the *coarse solves*: each of those draws solved at 17² from its own initial
   state (the 65² draw at the coarse points) and interpolated bilinearly onto 65², against its
   65² solve. Targets: mean nRMSE at least 25 % below coarse data only's (per-seed reduction, 2 SE
   beyond 25 %), and below the coarse solves' error on every family where that error is 0.05
   or more. Beside them, the physics at inference rather than in training: *refined at
   inference*, coarse data only's predictions of the fine draws refined by
   ``--inference-refine`` Gauss–Newton iterations against the residual at 65²
   (``evaluate --refine``; for a residual linear in the unknowns the first lands at its
   minimiser whatever the prediction). ``--c2-arms`` runs some of the arms (coarse data only
   always).
d. **Zero-shot super-resolution.** The universal model of a. (trained at 17²) on 33² solves of
   ``coarse``'s ranges (stage ``coarse2n``, never trained on). Target: nRMSE at 2N <= 1.2x
   that at N, per family (the per-seed ratio, 2 SE below 1.2).

Nothing here is tuned to a target. ``python benchmarks/claims.py [--out DIR] [--seeds N]
[--claims a,b,c,c2,d]`` (``--claims c``: only c's arms, on only the stages c needs)
writes ``claims.json`` (every seed's group reports, walls and curves, and the aggregates),
``claims.md`` (the tables), ``curves.png`` (training data loss, relative L2 of the normalised
fields, against the step, per variant and seed) and the runs (``runs/<variant>-s<seed>``);
``--smoke`` runs tiny sizes on 2 seeds to check the script; ``--threads 1`` trains and scores on
one thread (on a machine shared with other jobs several times faster for these small models).
"""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import argparse
import json
import math
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from _data import coarse_from_fine  # benchmarks/_data.py (the script folder is on sys.path)
from rich.console import Console
from rich.table import Table

from pdeladder.curriculum.generation import materialize
from pdeladder.curriculum.loader import parse_curriculum
from pdeladder.dataset.catalog import Catalog
from pdeladder.dataset.loader import StoreDataset
from pdeladder.ray_runtime import ray_session
from pdeladder.trainer import evaluate_checkpoint, train_curriculum
from pdeladder.trainer.baselines import baseline_prediction, mean_field
from pdeladder.trainer.evaluate import group_report
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.processor import DataProcessor

QUICKSTART = Path(__file__).parents[1] / "examples" / "quickstart.yaml"
FAMILIES = ("heat", "darcy", "burgers", "advection_diffusion")
#: Evaluation reads at most this many held-out samples per group (``evaluate_checkpoint``).
EVAL_SAMPLES = 16
#: The store's curriculum seed (the solved data) and the first training seed.
SEED = 20240601
#: a.'s arms: the universal model, then (i) the specialists that get as many batches of their
#: family as in the universal model (steps / F): of 1/F the parameters, of its full size, and
#: neuraloperator's FNO of its width; then (ii) full-size specialists of as many steps as the
#: universal model (F times its compute), and the universal model given that compute (F times
#: its steps): what closes (ii)'s gap if steps per family do; last the universal model given
#: both F times the steps and F times the parameters (width x sqrt(F)), as the F specialists
#: together have: what closes what steps leave, if capacity does.
A_ARMS = (
    "universal",
    "specialist",
    "full specialist",
    "fno",
    "full specialist, equal steps",
    "universal, F x steps",
    "universal, F x steps and parameters",
)
#: (ii)'s universal arms given the specialists' compute, each against the full specialists.
A_EQUAL_COMPUTE = A_ARMS[5:]
#: (i)'s specialists, against which the universal model is judged.
A_SHARING = A_ARMS[1:4]
#: c.'s arms at equal steps, data only first (the others are compared with it); the last is
#: the bound of the self-improvement arms: every unsolved draw solved.
FEW_ARMS = ("data only", "self-improvement", "self-improvement + targets", "all solved")
#: c.'s self-improvement arms, judged against c1.
SI_ARMS = FEW_ARMS[1:3]
#: The claims, each run on its own (``--claims``).
CLAIMS = ("a", "b", "c", "c2", "d")
#: c1: the self-improvement arms' mean nRMSE at least this much below data only's.
C1_REDUCTION = 0.20
#: c2.'s arms at equal steps on the coarse data, data only first: the phase's residual, then
#: its residual and targets, on draws at four times the data's cells per axis.
C2_ARMS = ("coarse data only", "fine residual", "fine residual + targets", "refined at inference")
#: c2.'s arm that trains nothing: coarse data only's predictions of the fine draws refined at
#: inference (``evaluate --refine``) against the residual on the fine grid.
C2_REFINED = C2_ARMS[3]
#: c2: the fine arms' mean nRMSE on the fine solves at least this much below coarse data only's.
C2_REDUCTION = 0.25
#: c2: beside the coarse solves' own error, on the families where it is at least this.
C2_SOLVE_ERROR = 0.05
#: d.: nRMSE at 2N at most this many times that at N.
D_RATIO = 1.2


@dataclass(frozen=True)
class Sizes:
    resolution: int = 17
    samples: int = 64  # solved per family in coarse and fine
    few: int = 8
    steps: int = 400  # universal / curriculum's coarse stage
    fine_steps: int = 200
    few_steps: int = 200
    si_steps: int = 100
    si_samples: int = 32  # unsolved draws per family in the self-improvement phase (c., c2.)
    refine_steps: int = 150  # most Gauss–Newton iterations to each unsolved draw's target
    inference_refine: int = 5  # c2.'s refined arm: Gauss–Newton iterations at inference
    a_arms: str = ";".join(A_ARMS)  # a.'s arms to run, ";"-separated (the universal model always)
    c2_arms: str = ",".join(C2_ARMS)  # c2.'s arms to run (coarse data only always)
    held_out: float = 0.25
    seeds: int = 3

    @classmethod
    def smoke(cls) -> "Sizes":
        return cls(
            resolution=9,
            samples=8,
            few=4,
            steps=8,
            fine_steps=4,
            few_steps=4,
            si_steps=4,
            si_samples=4,
            refine_steps=10,
            inference_refine=2,
            held_out=0.25,
            seeds=2,
        )


def quickstart() -> dict[str, Any]:
    """The quick-start curriculum as plain data, with its ``plane`` and ``refine`` stages."""
    doc = yaml.safe_load(QUICKSTART.read_text())
    stages = {s["name"]: s for s in doc["stages"]}
    if missing := {"plane", "refine"} - set(stages):
        raise SystemExit(f"{QUICKSTART}: no stage {', '.join(sorted(missing))}")
    return {"model": doc["model"], **stages}


def stage(name: str, source: dict, resolution: int, samples: int, families=FAMILIES, **training):
    """A stage of ``source``'s (a quick-start stage's) families in 2D at ``resolution``, its
    training settings updated by ``training`` (``self_improvement=None`` drops the phase)."""
    entries = [
        {**e, "dims": [2], "resolutions": [resolution], "samples": samples}
        for e in source["families"]
        if e["family"] in families
    ]
    training = {"replay": None, **training}  # the quick-start replays its own stages
    tr = {k: v for k, v in {**source["training"], **training}.items() if v is not None}
    return {"name": name, "families": entries, "training": tr}


def curriculum(name: str, stages: list[dict], model: dict, out: Path, seed: int = SEED):
    """Parse the curriculum (written to ``out/<name>.yaml`` beside the runs)."""
    text = yaml.safe_dump({"name": name, "seed": seed, "model": model, "stages": stages})
    path = out / f"{name}.yaml"
    path.write_text(text)
    return parse_curriculum(text, str(path))


def curve(run_dir: Path) -> list[tuple[int, float]]:
    """(global step, data loss) from a run's metrics log, stages laid end to end."""
    points, offset, last = [], 0, None
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if last is not None and r["stage"] != last[0]:
            offset += last[1]
        last = (r["stage"], r["step"])
        points.append((offset + r["step"], r["data_loss"]))
    return points


class RecordedLoss:
    """neuraloperator's relative Lp loss (summed over the batch, as its Trainer expects), each
    batch's mean per sample recorded."""

    def __init__(self, dim: int):
        from neuralop.losses import LpLoss

        self.loss, self.values = LpLoss(d=dim, p=2, reduction="sum"), []

    def __call__(self, out, y, **_):
        value = self.loss(out, y)
        self.values.append(value.item() / len(y))
        return value


def fno_specialist(
    store: str, path: str, width: int, model: dict, steps: int, lr: float, sizes: Sizes, seed: int
):
    """neuraloperator's FNO on one group with its own Trainer: inputs and normalised targets
    as ours (``DataProcessor``), axes of one point dropped, the same kept frequencies
    (benchmarks/trainer.py); its initialisation (torch's and numpy's global generators) and its
    data order (the loader's generator) from ``seed``; scored with ``group_report`` on the
    held-out samples that ``evaluate_checkpoint`` reads; AdamW at ``lr`` (our specialist's
    ``training.learning_rate.initial``) with cosine decay per epoch. Returns (report, curve,
    wall seconds, parameters)."""
    from neuralop import Trainer
    from neuralop.models import FNO

    catalog = Catalog.build(store, groups=[path], held_out=sizes.held_out)
    data, split = StoreDataset(catalog, batch_size=8), catalog.groups[path]
    processor = DataProcessor(catalog.layout)

    def tensors(indices):
        batch = data.load(path, indices)
        x, _ = processor.inputs(batch)  # (B, C_in, T, X, Y, 1)
        y = processor.normalised(batch)[:, batch["predicted"][0]]  # (B, C_out, T, X, Y, 1)
        keep = [2 + a for a, n in enumerate(x.shape[2:]) if n > 1]
        drop = [a for a in range(2, x.ndim) if a not in keep]
        return batch, x.squeeze(tuple(drop)), y.squeeze(tuple(drop)), drop

    _, x, y, _ = tensors(split.train)
    shape = x.shape[2:]
    modes = model["modes"]
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002  (the global one, whatever draws from it)
    n_modes = [min(2 * modes - 1, n) for n in shape[:-1]] + [
        min(2 * modes - 2, 2 * (shape[-1] // 2))
    ]
    fno = FNO(
        n_modes=tuple(n_modes),
        in_channels=x.shape[1],
        out_channels=y.shape[1],
        hidden_channels=width,
        n_layers=model["layers"],
        domain_padding=0.25,
        use_channel_mlp=False,
    )
    batch_size = 8
    loader = torch.utils.data.DataLoader(
        [{"x": a, "y": b} for a, b in zip(x, y, strict=True)],
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    epochs = max(1, round(steps / len(loader)))
    optimizer = torch.optim.AdamW(fno.parameters(), lr=lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    loss = RecordedLoss(len(shape))
    trainer = Trainer(model=fno, n_epochs=epochs, device="cpu", eval_interval=epochs + 1)
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # its Trainer calls model(**batch), the target included
        warnings.filterwarnings("ignore", r"FNO.forward\(\) received unexpected", UserWarning)
        trainer.train(
            loader, {}, optimizer, scheduler, training_loss=loss, eval_losses={"l2": loss}
        )
    wall = time.perf_counter() - t0
    fno.eval()
    batch, xt, _, drop = tensors(split.test[:EVAL_SAMPLES])
    with torch.no_grad():
        out = fno(xt)
    for a in drop:
        out = out.unsqueeze(a)
    pred = torch.zeros_like(processor.normalised(batch))
    pred[:, batch["predicted"][0]] = out
    pred = processor.physical(pred, batch["family"])
    mean = mean_field(processor, data, path, split.train) if batch["grid"].snapshots == 1 else None
    truth = processor.fields(batch)
    report = group_report(pred, truth, batch, catalog.layout, baseline_prediction(truth, mean))
    points = list(enumerate(loss.values[: epochs * len(loader)], start=1))
    return report, points, wall, sum(p.numel() for p in fno.parameters())


def mean_se(values) -> dict[str, Any]:
    """Mean and standard error (std(ddof=1) / sqrt(n)) of per-seed ``values``, which are kept."""
    v = np.asarray(values, dtype=float)
    se = float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else math.nan
    return {"mean": float(v.mean()), "se": se, "seeds": v.tolist()}


def paired(arm, other, lower: bool = True) -> dict[str, Any]:
    """``arm − other`` per seed (``other`` a list, or one number: a threshold), its mean ± SE,
    and the verdict of the claim that ``arm`` is lower (``lower``) or higher than ``other``:
    met when the mean difference is in the claim's favour by more than 2 SE, missed when it is
    against it by more than 2 SE, else no difference measured."""
    diff = mean_se(np.asarray(arm, dtype=float) - np.asarray(other, dtype=float))
    gain = -diff["mean"] if lower else diff["mean"]
    if gain > 2 * diff["se"]:
        diff["verdict"] = "met"
    elif -gain > 2 * diff["se"]:
        diff["verdict"] = "missed"
    else:
        diff["verdict"] = "no difference measured"
    return diff


@dataclass
class Bench:
    """One run's shared state: sizes, store, stages, the seed trained with, and what every
    variant of that seed cost (:meth:`for_seed` gives a fresh record per seed)."""

    sizes: Sizes
    out: Path
    model: dict
    stages: dict[str, dict]
    store: str
    snapshots: dict[str, int]
    self_improvement: dict
    seed: int = SEED
    threads: int | str = "auto"
    walls: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)
    curves: dict[str, list] = field(default_factory=dict)
    started: set[Path] = field(default_factory=set)

    def for_seed(self, seed: int) -> "Bench":
        """This bench trained with ``seed``, with its own (empty) records."""
        return replace(self, seed=seed, walls={}, steps={}, params={}, curves={}, started=set())

    def curriculum(self, name: str, stages: list[dict], model: dict | None = None):
        """The curriculum ``<name>-s<seed>`` of this bench's seed: its runs' folder
        ``out/runs/<name>-s<seed>`` is never shared by two seeds."""
        model = self.model if model is None else model
        if self.threads != "auto":
            stages = [with_training(s, threads=self.threads) for s in stages]
        return curriculum(f"{name}-s{self.seed}", stages, model, self.out, self.seed)

    def path(self, stage_name: str, family: str) -> str:
        res = {"coarse": self.sizes.resolution, "few": self.sizes.resolution,
               "c2": self.finest_resolution}.get(stage_name, self.fine_resolution)  # fmt: skip
        return f"{stage_name}/{family}/2d_n{res}_t{self.snapshots[family]}"

    @property
    def fine_resolution(self) -> int:
        return 2 * self.sizes.resolution - 1  # twice the cells: 17 -> 33

    @property
    def finest_resolution(self) -> int:
        return 4 * self.sizes.resolution - 3  # four times the cells: 17 -> 65

    def train(self, name: str, spec, stages=None, held_out=None) -> Path:
        """Train ``spec``'s ``stages`` into the run folder of ``spec``; record the variant
        ``name``'s wall time, steps, parameters and curve; the last stage's model folder."""
        run_dir = self.out / "runs" / spec.name
        chosen = [spec.stage(n) for n in stages] if stages else spec.stages
        for s in chosen:  # fresh stages: one-worker stages resume what an earlier run left
            shutil.rmtree(run_dir / "stages" / s.name, ignore_errors=True)
        if run_dir not in self.started:  # a new run (not a later stage): its metrics start over
            (run_dir / "metrics.jsonl").unlink(missing_ok=True)
            self.started.add(run_dir)
        t0 = time.perf_counter()
        result = train_curriculum(
            spec,
            stages=stages,
            store_url=self.store,
            workers=1,
            run_dir=run_dir,
            checkpoint_every=10**9,  # the last step only
            log_every=max(1, self.sizes.steps // 50),
            held_out=self.sizes.held_out if held_out is None else held_out,
            progress=False,
        )
        self.walls[name] = time.perf_counter() - t0
        self.steps[name] = sum(
            s.training.steps
            + (s.training.self_improvement.steps if s.training.self_improvement else 0)
            for s in chosen
        )
        model, _ = load_model(result.checkpoint)
        self.params[name] = sum(p.numel() for p in model.parameters())
        self.curves[name] = curve(run_dir)
        self.log(name)
        return result.checkpoint

    def log(self, name: str) -> None:
        print(f"seed {self.seed}: {name}, {self.walls[name]:.0f} s", flush=True)

    def scores(
        self,
        checkpoint: Path,
        held_out: float | None = None,
        groups: list[str] | None = None,
        refine: int = 0,
    ) -> dict[str, dict]:
        """``evaluate_checkpoint``'s group reports by group path (of ``groups``, default all)
        on the last ``held_out`` (default ``--held-out``) of each group, its predictions
        refined by ``refine`` iterations."""
        share = self.sizes.held_out if held_out is None else held_out
        report = evaluate_checkpoint(
            checkpoint, self.store, held_out=share, groups=groups, refine=refine
        )
        return report["groups"]


def setup(
    sizes: Sizes, out: Path, model: dict | None, threads: int | str = "auto", claims=CLAIMS
) -> Bench:
    """The stages from the quick-start's that ``claims`` need, solved into ``out/store.zarr``;
    ``threads``: every training stage's ``training.threads``."""
    qs = quickstart()
    model = model or qs["model"]
    n, n2, n4 = sizes.resolution, 2 * sizes.resolution - 1, 4 * sizes.resolution - 3
    plane, refine = qs["plane"], qs["refine"]
    si = refine["training"]["self_improvement"] | {
        "steps": sizes.si_steps,
        "samples": sizes.si_samples,
    }
    every = {
        "coarse": stage("coarse", plane, n, sizes.samples, steps=sizes.steps),
        "fine": stage(
            "fine", refine, n2, sizes.samples, steps=sizes.fine_steps, self_improvement=None
        ),
        "coarse2n": stage("coarse2n", plane, n2, EVAL_SAMPLES, steps=1),
        "c2": stage("c2", plane, n4, 2 * EVAL_SAMPLES, steps=1),  # the first half: baselines
        "few": stage("few", plane, n, sizes.few, steps=sizes.few_steps, self_improvement=si),
        "all solved": stage(
            "all-solved", plane, n, sizes.few + si["samples"], steps=sizes.few_steps + si["steps"]
        ),
    }
    needs = {"a": ["coarse"], "b": ["coarse", "fine"], "c": ["coarse", "few", "all solved"],
             "c2": ["coarse", "c2"], "d": ["coarse", "coarse2n"]}  # fmt: skip
    stages = {k: v for k, v in every.items() if any(k in needs[c] for c in claims)}
    store = str((out / "store.zarr").absolute())
    t0 = time.perf_counter()
    solved = curriculum("claims", list(stages.values()), model, out)
    materialize(solved, store_url=store)
    snapshots = {e.family: g.snapshots for e, g in solved.stages[0].groups()}
    bench = Bench(sizes, out, model, stages, store, snapshots, si, threads=threads)
    bench.walls["solve (all stages)"] = time.perf_counter() - t0
    return bench


def with_training(stage_dict: dict, **training) -> dict:
    """The stage with its training settings updated (a ``None`` drops the key)."""
    tr = {k: v for k, v in {**stage_dict["training"], **training}.items() if v is not None}
    return {**stage_dict, "training": tr}


def curriculum_and_shuffled(bench: Bench, with_b: bool = True) -> tuple[Path, ...]:
    """b.'s two variants; the curriculum's first stage is a.'s universal model. Returns the
    model folders (universal, curriculum, shuffled), the last two None without b."""
    coarse, s = bench.stages["coarse"], bench.sizes
    if not with_b:
        return bench.train("universal", bench.curriculum("universal", [coarse])), None, None
    fine = bench.stages["fine"]
    spec = bench.curriculum("curriculum", [coarse, fine])
    universal = bench.train("universal", spec, ["coarse"])
    final = bench.train("curriculum fine stage", spec, ["fine"])  # warm start from coarse
    mixed = with_training(fine, steps=s.steps + s.fine_steps, replay=["coarse"])
    spec = bench.curriculum("shuffled", [coarse, mixed])
    return universal, final, bench.train("shuffled", spec, ["fine"])


def a_arms(sizes: Sizes) -> tuple[str, ...]:
    """The a. arms ``--a-arms`` names, in :data:`A_ARMS`' order, the universal model first."""
    names = {a.strip() for a in sizes.a_arms.split(";")} | {A_ARMS[0]}
    if names - set(A_ARMS):
        raise SystemExit(f"--a-arms {sizes.a_arms!r}: ';'-separated names of {A_ARMS}")
    return tuple(a for a in A_ARMS if a in names)


def specialists(bench: Bench) -> tuple[dict[str, dict[str, dict]], int]:
    """a.'s per-family arms (:func:`a_arms` but the universal ones): held-out group reports by
    arm and family, and the width of the 1/F-parameter specialists."""
    families, model, s = list(bench.snapshots), bench.model, bench.sizes
    small = max(1, round(model["width"] / math.sqrt(len(families))))
    few_steps = max(1, s.steps // len(families))
    chosen = a_arms(s)
    kinds = {  # arm: (variant name, width, steps)
        "specialist": ("specialist", small, few_steps),
        "full specialist": ("full specialist", model["width"], few_steps),
        "full specialist, equal steps": ("full specialist, equal steps", model["width"], s.steps),
    }
    kinds = {arm: kind for arm, kind in kinds.items() if arm in chosen}
    out: dict[str, dict[str, dict]] = {arm: {} for arm in (*kinds, "fno") if arm in chosen}
    for f in families:
        coarse = bench.stages["coarse"]
        only = {**coarse, "families": [e for e in coarse["families"] if e["family"] == f]}
        for arm, (variant, width, steps) in kinds.items():
            part = with_training(only, steps=steps)
            name = variant.replace(", ", "-").replace(" ", "-")
            spec = bench.curriculum(f"{name}-{f}", [part], {**model, "width": width})
            groups = bench.scores(bench.train(f"{variant} {f}", spec))
            out[arm][f] = groups[bench.path("coarse", f)]
        if "fno" not in chosen:
            continue
        name, lr = f"fno {f}", bench.stages["coarse"]["training"]["learning_rate"]["initial"]
        out["fno"][f], bench.curves[name], bench.walls[name], bench.params[name] = fno_specialist(
            bench.store,
            bench.path("coarse", f),
            model["width"],
            model,
            few_steps,
            lr,
            s,
            bench.seed,
        )
        bench.steps[name] = len(bench.curves[name])
        bench.log(name)
    return out, small


def few_samples(bench: Bench) -> dict[str, dict[str, dict]]:
    """c.'s arms at equal steps: reports on ``coarse``'s draws by arm and family."""
    few, s = bench.stages["few"], bench.sizes
    si = few["training"]["self_improvement"]
    targets = si | {"refine_steps": s.refine_steps, "target_weight": 1.0}
    parts = {
        "data only": with_training(few, steps=s.few_steps + s.si_steps, self_improvement=None),
        "self-improvement": few,
        "self-improvement + targets": with_training(few, self_improvement=targets),
        "all solved": with_training(bench.stages["all solved"], self_improvement=None),
    }
    out = {}
    for arm in FEW_ARMS:
        name = "few-" + arm.replace(" + ", "-").replace(" ", "-")
        spec = bench.curriculum(name, [parts[arm]])
        groups = bench.scores(bench.train(f"few {arm}", spec, held_out=0.0))
        out[arm] = {f: groups[bench.path("coarse", f)] for f in bench.snapshots}
    return out


def beyond_the_data(bench: Bench) -> dict[str, dict[str, dict]]:
    """c2.'s arms (:func:`c2_arms`) at equal steps on ``coarse``'s data: reports on the last
    half of ``c2``'s fine solves by arm and family. The refined arm is coarse data only's
    model scored with ``--inference-refine`` iterations of refinement (its report's
    ``unrefined`` scores are coarse data only's)."""
    coarse, s = bench.stages["coarse"], bench.sizes
    fine = bench.self_improvement | {"resolution": bench.finest_resolution}
    targets = fine | {"refine_steps": s.refine_steps, "target_weight": 1.0}
    parts = {
        "coarse data only": with_training(
            coarse, steps=s.steps + s.si_steps, self_improvement=None
        ),
        "fine residual": with_training(coarse, self_improvement=fine),
        "fine residual + targets": with_training(coarse, self_improvement=targets),
    }
    chosen = c2_arms(s)
    paths = [bench.path("c2", f) for f in bench.snapshots]
    out = {}
    for arm in (a for a in chosen if a in parts):
        spec = bench.curriculum("c2-" + arm.replace(" + ", "-").replace(" ", "-"), [parts[arm]])
        refine = s.inference_refine if arm == C2_ARMS[0] and C2_REFINED in chosen else 0
        groups = bench.scores(bench.train(f"c2 {arm}", spec), 0.5, paths, refine)
        out[arm] = {f: groups[bench.path("c2", f)] for f in bench.snapshots}
        if refine:
            out[C2_REFINED] = out[arm]
            out[arm] = {f: r | r["unrefined"] for f, r in out[arm].items()}
    return out


def c2_arms(sizes: Sizes) -> tuple[str, ...]:
    """The c2. arms ``--c2-arms`` names, in :data:`C2_ARMS`' order, coarse data only first."""
    names = {a.strip() for a in sizes.c2_arms.split(",")} | {C2_ARMS[0]}
    if names - set(C2_ARMS):
        raise SystemExit(f"--c2-arms {sizes.c2_arms!r}: comma-separated names of {C2_ARMS}")
    return tuple(a for a in C2_ARMS if a in names)


def coarse_solves(bench: Bench) -> dict[str, float]:
    """c2.'s reference per family: the nRMSE (as the scores') of the coarse solves of the
    scored ``c2`` draws, each solved at ``--resolution`` from the fine draw's initial state at
    the coarse points and interpolated bilinearly onto the fine grid, against its fine solve."""
    from pdeladder.dataset.store import open_store
    from pdeladder.solvers.registry import get_family
    from pdeladder.trainer.metrics import nrmse

    store, out, n = open_store(bench.store), {}, bench.sizes.resolution
    for f, snapshots in bench.snapshots.items():
        fam, group = get_family(f), store.group(bench.path("c2", f))
        fine, coarse = fam.grid(2, bench.finest_resolution, snapshots), fam.grid(2, n, snapshots)
        predicted = [c.role != "input" for c in fam.channels_for(2)]
        scored = range(group.n_samples // 2, group.n_samples)  # held_out=0.5's half
        errors = []
        with coarse_from_fine(f, fine, coarse):
            for i, params, seed in zip(
                scored,
                group.params()[scored.start :],
                group.column("seed")[scored.start :],
                strict=True,
            ):
                solve = fam.run(fam.Params.from_vector(params), coarse, int(seed)).fields
                t, c = solve.shape[:2]  # (T, C, n, n, 1) -> bilinear onto the fine grid
                up = torch.nn.functional.interpolate(
                    torch.from_numpy(solve[..., 0]).double().reshape(t * c, 1, n, n),
                    size=(fine.resolution,) * 2,
                    mode="bilinear",
                    align_corners=True,
                ).reshape(1, t, c, fine.resolution, fine.resolution, 1)
                truth = torch.from_numpy(group.read(i)).double()[None]
                errors.append(nrmse(up.movedim(2, 1), truth.movedim(2, 1))[0, predicted])
        out[f] = float(torch.cat(errors).mean())
    return out


def one_seed(bench: Bench, claims: tuple[str, ...] = CLAIMS) -> dict[str, Any]:
    """The ``claims``' variants trained with ``bench``'s seed: their group reports by claim,
    family and arm (``{"a": {family: {arm of A_ARMS}}, "b": {family:
    {"curriculum", "shuffled"}}, "c" and "c2": {family: {arm}}, "d": {family: {"n", "2n"}}}``),
    and the
    width of a.'s specialists (None without a.)."""
    fam, out, width = list(bench.snapshots), {}, None
    if set(claims) & set("abd"):
        universal_dir, curriculum_dir, shuffled_dir = curriculum_and_shuffled(bench, "b" in claims)
        universal = bench.scores(universal_dir)
        held = {f: universal[bench.path("coarse", f)] for f in fam}
    if "a" in claims:
        per_family, width = specialists(bench)
        longer = with_training(bench.stages["coarse"], steps=len(fam) * bench.sizes.steps)
        wider = {**bench.model, "width": round(bench.model["width"] * math.sqrt(len(fam)))}
        for arm, model in zip(A_EQUAL_COMPUTE, (bench.model, wider), strict=True):
            if arm in a_arms(bench.sizes):
                name = arm.replace(", ", "-").replace(" ", "-")
                groups = bench.scores(bench.train(arm, bench.curriculum(name, [longer], model)))
                per_family[arm] = {f: groups[bench.path("coarse", f)] for f in fam}
        per_family["universal"] = held
        out["a"] = {f: {arm: per_family[arm][f] for arm in per_family} for f in fam}
    if "b" in claims:
        final, shuffled = bench.scores(curriculum_dir), bench.scores(shuffled_dir)
        for key in ("walls", "steps"):
            records = getattr(bench, key)
            records["curriculum"] = records["universal"] + records["curriculum fine stage"]
        bench.params["curriculum"] = bench.params["curriculum fine stage"]
        bench.curves["curriculum"] = bench.curves.pop("curriculum fine stage")  # both stages
        out["b"] = {
            f: {
                "curriculum": final[bench.path("fine", f)],
                "shuffled": shuffled[bench.path("fine", f)],
            }
            for f in fam
        }
    if "c" in claims:
        few = few_samples(bench)
        out["c"] = {f: {arm: few[arm][f] for arm in FEW_ARMS} for f in fam}
    if "c2" in claims:
        fine = beyond_the_data(bench)
        out["c2"] = {f: {arm: fine[arm][f] for arm in fine} for f in fam}
    if "d" in claims:
        out["d"] = {f: {"n": held[f], "2n": universal[bench.path("coarse2n", f)]} for f in fam}
    return {"claims": out, "specialist_width": width}


def nrmses(per_seed: list[dict], claim: str, family: str, arm: str, key="nrmse") -> list[float]:
    """One figure of one arm, per seed."""
    return [s[claim][family][arm][key] for s in per_seed]


def family_means(per_seed: list[dict], claim: str, arm: str, key="nrmse") -> list[float]:
    """The mean over the families of one arm's figure, per seed."""
    return [float(np.mean([r[arm][key] for r in s[claim].values()])) for s in per_seed]


def aggregate(per_seed: list[dict], solves: dict[str, float] | None = None) -> dict[str, Any]:
    """The claims over the seeds (``per_seed``: :func:`one_seed`'s ``claims``): every arm's
    mean ± SE, its baseline's mean, the paired differences and the verdicts (the claims the
    seeds hold); ``solves``: c2.'s :func:`coarse_solves`."""
    fam = list(next(iter(per_seed[0].values())))
    out = {}

    def arms(claim: str, f: str, names) -> dict[str, Any]:
        out = {n: mean_se(nrmses(per_seed, claim, f, n)) for n in names}
        base = nrmses(per_seed, claim, f, names[0], "baseline_nrmse")
        return {**out, "baseline": float(np.mean(base))}

    if "a" in per_seed[0]:
        out["a"] = a = {}
        for f in fam:
            ran = tuple(arm for arm in A_ARMS if arm in per_seed[0]["a"][f])
            r = arms("a", f, ran)
            if sharing := [n for n in A_SHARING if n in ran]:
                r["best"] = min(sharing, key=lambda n: r[n]["mean"])
                r["difference"] = paired(r["universal"]["seeds"], r[r["best"]]["seeds"])
                # (i)'s target is "no worse": missed only where the universal model is higher
                r["verdict"] = "missed" if r["difference"]["verdict"] == "missed" else "met"
            if "full specialist, equal steps" in ran:
                full = r["full specialist, equal steps"]["seeds"]
                r["gap"] = {
                    arm: paired(r[arm]["seeds"], full)
                    for arm in ("universal", *A_EQUAL_COMPUTE)
                    if arm in ran
                }
            a[f] = r
    if "b" in per_seed[0]:
        out["b"] = claim_b(per_seed, fam, arms)
    if "c" in per_seed[0]:
        out["c"] = claim_c(per_seed, fam, arms)
    if "c2" in per_seed[0]:
        out["c2"] = claim_c2(per_seed, fam, arms, solves)
    if "d" in per_seed[0]:
        out["d"] = d = {}
        for f in fam:
            r = arms("d", f, ("n", "2n"))
            r["2n baseline"] = float(np.mean(nrmses(per_seed, "d", f, "2n", "baseline_nrmse")))
            ratio = np.divide(r["2n"]["seeds"], r["n"]["seeds"])
            r["ratio"] = mean_se(ratio)
            r["ratio - target"] = paired(ratio, D_RATIO)
            r["verdict"] = r["ratio - target"]["verdict"]
            d[f] = r
    return out


def claim_b(per_seed: list[dict], fam: list[str], arms) -> dict[str, Any]:
    """b. over the seeds: per family and the mean over the families."""
    b = {"families": {}}
    for f in fam:
        r = arms("b", f, ("curriculum", "shuffled"))
        r["difference"] = paired(r["curriculum"]["seeds"], r["shuffled"]["seeds"])
        b["families"][f] = r
    b["mean"] = {n: mean_se(family_means(per_seed, "b", n)) for n in ("curriculum", "shuffled")}
    b["mean"]["baseline"] = float(
        np.mean(family_means(per_seed, "b", "curriculum", "baseline_nrmse"))
    )
    b["difference"] = paired(b["mean"]["curriculum"]["seeds"], b["mean"]["shuffled"]["seeds"])
    b["verdict"] = b["difference"]["verdict"]
    return b


def claim_c(per_seed: list[dict], fam: list[str], arms) -> dict[str, Any]:
    """c. over the seeds: every arm against data only, c1's verdict for the self-improvement
    arms and the reduction of their bound (all solved)."""
    c = {"families": {}}
    for f in fam:
        r = arms("c", f, FEW_ARMS)
        r["residual"] = {n: mean_se(nrmses(per_seed, "c", f, n, "residual")) for n in FEW_ARMS}
        r["vs data only"] = {
            n: paired(r[n]["seeds"], r["data only"]["seeds"]) for n in FEW_ARMS[1:]
        }
        c["families"][f] = r
    c["mean"] = {n: mean_se(family_means(per_seed, "c", n)) for n in FEW_ARMS}
    c["mean"]["baseline"] = float(
        np.mean(family_means(per_seed, "c", "data only", "baseline_nrmse"))
    )
    c["c1"] = {}
    for n in FEW_ARMS[1:]:
        reduction = 1 - np.divide(c["mean"][n]["seeds"], c["mean"]["data only"]["seeds"])
        target = paired(reduction, C1_REDUCTION, lower=False)
        worse = [f for f, r in c["families"].items() if r["vs data only"][n]["verdict"] == "missed"]
        verdict = "missed" if worse else target["verdict"]
        c["c1"][n] = {"reduction": mean_se(reduction), "reduction - target": target,
                      "families worse": worse, "verdict": verdict}  # fmt: skip
    return c


def claim_c2(
    per_seed: list[dict], fam: list[str], arms, solves: dict[str, float]
) -> dict[str, Any]:
    """c2. over the seeds: every arm against coarse data only and against the coarse solves;
    the reduction of the mean and its verdict per fine arm."""
    names = [a for a in C2_ARMS if a in per_seed[0]["c2"][fam[0]]]
    c2 = {"families": {}}
    for f in fam:
        r = arms("c2", f, names)
        r["coarse solves"] = solves[f]
        r["vs coarse data only"] = {
            n: paired(r[n]["seeds"], r[names[0]]["seeds"]) for n in names[1:]
        }
        r["vs coarse solves"] = {n: paired(r[n]["seeds"], solves[f]) for n in names}
        c2["families"][f] = r
    c2["mean"] = {n: mean_se(family_means(per_seed, "c2", n)) for n in names}
    c2["mean"]["baseline"] = float(
        np.mean(family_means(per_seed, "c2", names[0], "baseline_nrmse"))
    )
    c2["mean"]["coarse solves"] = float(np.mean(list(solves.values())))
    c2["verdicts"] = {}
    for n in names[1:]:
        reduction = 1 - np.divide(c2["mean"][n]["seeds"], c2["mean"][names[0]]["seeds"])
        target = paired(reduction, C2_REDUCTION, lower=False)
        above = [f for f, r in c2["families"].items()
                 if r["coarse solves"] >= C2_SOLVE_ERROR
                 and r["vs coarse solves"][n]["verdict"] != "met"]  # fmt: skip
        c2["verdicts"][n] = {"reduction": mean_se(reduction), "reduction - target": target,
                             "not below the coarse solves": above,
                             "verdict": target["verdict"] if not above else "missed"}  # fmt: skip
    return c2


def run(
    sizes: Sizes, out: Path, model: dict | None, threads: int | str = "auto", claims=CLAIMS
) -> dict[str, Any]:
    bench = setup(sizes, out, model, threads, claims)
    seeds = [SEED + k for k in range(sizes.seeds)]
    runs = {}
    for seed in seeds:
        seeded = bench.for_seed(seed)
        runs[seed] = {**one_seed(seeded, claims), "bench": seeded}
    first = runs[seeds[0]]["bench"]
    walls = {n: mean_se([runs[s]["bench"].walls[n] for s in seeds]) for n in first.walls}
    solves = coarse_solves(bench) if "c2" in claims else None
    return {
        "sizes": asdict(sizes),
        "model": bench.model,
        "threads": threads,
        "seeds": seeds,
        "specialist_width": runs[seeds[0]]["specialist_width"],
        "params": first.params,
        "steps": first.steps,
        "wall_s": {
            **{k: round(v, 1) for k, v in bench.walls.items()},
            "per variant (mean over seeds)": {n: round(w["mean"], 1) for n, w in walls.items()},
        },
        "walls": walls,
        "claims": aggregate([runs[s]["claims"] for s in seeds], solves),
        "per_seed": {
            str(s): {
                "claims": runs[s]["claims"],
                "wall_s": {k: round(v, 1) for k, v in runs[s]["bench"].walls.items()},
            }
            for s in seeds
        },
        "curves": {str(s): runs[s]["bench"].curves for s in seeds},
    }


def ms(r: dict) -> str:
    """``mean ± SE``."""
    return f"{r['mean']:.3g} ± {r['se']:.2g}"


def diff(r: dict, words: tuple[str, str] = ("lower", "higher")) -> str:
    """A paired difference ``mean ± SE`` and what it shows: ``words[0]`` (the claim's way),
    ``words[1]`` (against it), each beyond 2 SE, else no difference measured."""
    said = {"met": words[0], "missed": words[1]}.get(r["verdict"], "no difference measured")
    return f"{r['mean']:+.3g} ± {r['se']:.2g}: {said}"


def tables(result: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The claims run as ``(title, header, rows)`` tables: each arm's nRMSE as mean ± SE over
    the seeds beside the mean of its trivial baseline on the same samples, the paired
    differences and the verdicts."""
    cl, n, k = result["claims"], result["sizes"]["resolution"], len(result["seeds"])
    seeds = f"mean ± SE over {k} seeds"
    out = []
    if "a" in cl:
        out.extend(tables_a(result, seeds))
    if "b" in cl:
        b = cl["b"]
        rows = [
            [f, ms(r["curriculum"]), ms(r["shuffled"]), f"{r['baseline']:.3g}",
             diff(r["difference"])]
            for f, r in b["families"].items()
        ]  # fmt: skip
        m = b["mean"]
        rows.append(["mean", ms(m["curriculum"]), ms(m["shuffled"]), f"{m['baseline']:.3g}",
                     diff(b["difference"]), b["verdict"]])  # fmt: skip
        out.append((
            f"b. curriculum vs shuffled: held-out nRMSE on the last stage ({2 * n - 1}², {seeds})",
            ["family", "curriculum", "shuffled", "baseline", "curriculum − shuffled (paired)",
             "curriculum < shuffled"],
            rows,
        ))  # fmt: skip
    if "c" in cl:
        out.append(table_c(result, seeds))
    if "c2" in cl:
        out.append(table_c2(result, seeds))
    if "d" in cl:
        rows = [
            [f, ms(d["n"]), f"{d['baseline']:.3g}", ms(d["2n"]), f"{d['2n baseline']:.3g}",
             f"{d['ratio']['mean']:.2f} ± {d['ratio']['se']:.2g}x", d["verdict"]]
            for f, d in cl["d"].items()
        ]  # fmt: skip
        out.append((
            f"d. zero-shot super-resolution: trained at {n}², evaluated at {2 * n - 1}² ({seeds})",
            ["family", f"{n}²", "baseline", f"{2 * n - 1}²", "baseline", "ratio",
             f"< {D_RATIO}x"],
            rows,
        ))  # fmt: skip
    rows = [
        [name, str(result["steps"].get(name, "")), str(result["params"].get(name, "")), ms(w)]
        for name, w in result["walls"].items()
    ]
    rows += [
        [k, "", "", f"{v:.0f}"] for k, v in result["wall_s"].items() if not isinstance(v, dict)
    ]
    out.append((
        f"compute per variant (wall s: {seeds})", ["variant", "steps", "parameters", "wall s"], rows
    ))  # fmt: skip
    return out


def tables_a(result: dict[str, Any], seeds: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """a.'s tables, of the arms that ran: (i) the universal model against the specialists given
    as many batches of their family, with the verdict; (ii) the full specialists of as many
    steps as the universal model against it and the universal arms of their compute."""
    a, n, steps = result["claims"]["a"], result["sizes"]["resolution"], result["sizes"]["steps"]
    ran = [arm for arm in A_ARMS if arm in next(iter(a.values()))]
    out = []
    if sharing := [arm for arm in A_SHARING if arm in ran]:
        rows = [
            [f, ms(r["universal"]), *[ms(r[arm]) for arm in sharing], f"{r['baseline']:.3g}",
             f"{r['best']}: {diff(r['difference'])}", r["verdict"]]
            for f, r in a.items()
        ]  # fmt: skip
        out.append((
            f"a (i). universal ({steps} steps) vs specialists given as many batches of their "
            f"family (steps / F): of 1/F the parameters (width {result['specialist_width']}), "
            "of the universal width, and neuraloperator's FNO of that width; held-out nRMSE at "
            f"{n}² ({seeds}); target: universal no worse than the best",
            ["family", "universal", *sharing, "baseline", "universal − best (paired)",
             "no worse"],
            rows,
        ))  # fmt: skip
    compared = [arm for arm in ("universal", *A_EQUAL_COMPUTE) if arm in ran]
    if "full specialist, equal steps" in ran:
        rows = [
            [f, ms(r["full specialist, equal steps"]),
             *[f"{ms(r[arm])} ({diff(r['gap'][arm])})" for arm in compared],
             f"{r['baseline']:.3g}"]
            for f, r in a.items()
        ]  # fmt: skip
        out.append((
            f"a (ii). full-width specialists of {steps} steps each (F times the universal "
            f"model's compute) against the universal model of {steps} steps, of F times as many, "
            f"and of F times as many steps and parameters; held-out nRMSE at {n}² ({seeds}), "
            "each universal arm's paired difference to the specialist in brackets",
            ["family", "specialist, equal steps", *compared, "baseline"],
            rows,
        ))  # fmt: skip
    return out


def table_c(result: dict[str, Any], seeds: str) -> tuple[str, list[str], list[list[str]]]:
    """c.'s table: every arm, the residuals, each arm against data only; the mean row holds
    c1's verdicts and the bound's reduction."""
    c, sizes = result["claims"]["c"], result["sizes"]
    rows = [
        [f, *[ms(r[a]) for a in FEW_ARMS], f"{r['baseline']:.3g}",
         " / ".join(f"{r['residual'][a]['mean']:.3g}" for a in FEW_ARMS),
         *[diff(r["vs data only"][a], ("lower", "worse")) for a in FEW_ARMS[1:]]]
        for f, r in c["families"].items()
    ]  # fmt: skip

    def reduction(arm: str) -> str:
        r, said = c["c1"][arm], f": {c['c1'][arm]['verdict']}" if arm in SI_ARMS else " (bound)"
        return (
            f"{100 * r['reduction']['mean']:.1f} ± {100 * r['reduction']['se']:.2g} % lower{said}"
        )

    m = c["mean"]
    rows.append(["mean", *[ms(m[a]) for a in FEW_ARMS], f"{m['baseline']:.3g}", "",
                 *[reduction(a) for a in FEW_ARMS[1:]]])  # fmt: skip
    steps = sizes["few_steps"] + sizes["si_steps"]
    return (
        f"c. {sizes['few']} solved samples per family, {steps} steps each: data only vs "
        f"self-improvement (residual on {sizes['si_samples']} unsolved draws per family) vs "
        "self-improvement + targets (the residual's minimisers, by Gauss–Newton) vs all solved "
        "(every unsolved draw solved: the "
        f"bound), nRMSE on unseen draws ({seeds}); c1 target: mean >= "
        f"{100 * C1_REDUCTION:.0f} % lower than data only, no family worse",
        ["family", *FEW_ARMS, "baseline", "residual (" + " / ".join(FEW_ARMS) + ")",
         *[f"{a} − data only (paired)" for a in FEW_ARMS[1:]]],
        rows,
    )  # fmt: skip


def table_c2(result: dict[str, Any], seeds: str) -> tuple[str, list[str], list[list[str]]]:
    """c2.'s table: every arm and the coarse solves at the fine resolution, each fine arm
    against coarse data only and against the coarse solves; the mean row holds the verdicts."""
    c2, sizes = result["claims"]["c2"], result["sizes"]
    names = [a for a in C2_ARMS if a in c2["mean"]]
    n, n4 = sizes["resolution"], 4 * sizes["resolution"] - 3
    rows = [
        [f, *[ms(r[a]) for a in names], f"{r['coarse solves']:.3g}", f"{r['baseline']:.3g}",
         *[diff(r["vs coarse data only"][a], ("lower", "worse")) for a in names[1:]],
         *[diff(r["vs coarse solves"][a], ("below", "above")) for a in names[1:]]]
        for f, r in c2["families"].items()
    ]  # fmt: skip

    def verdict(arm: str) -> str:
        v = c2["verdicts"][arm]
        above = ", ".join(v["not below the coarse solves"]) or "none"
        return (f"{100 * v['reduction']['mean']:.1f} ± {100 * v['reduction']['se']:.2g} % "
                f"lower (not below the coarse solves: {above}): {v['verdict']}")  # fmt: skip

    m = c2["mean"]
    rows.append(["mean", *[ms(m[a]) for a in names], f"{m['coarse solves']:.3g}",
                 f"{m['baseline']:.3g}", *[verdict(a) for a in names[1:]]])  # fmt: skip
    steps = sizes["steps"] + sizes["si_steps"]
    return (
        f"c2. solved data at {n}² only, {steps} steps each: coarse data only vs the phase's "
        f"residual on {n4}² draws vs its residual + targets (their minimisers, by "
        f"Gauss–Newton) vs coarse data only's predictions refined at inference by "
        f"{sizes['inference_refine']} Gauss–Newton iterations at {n4}², nRMSE on {n4}² solves "
        f"of unseen draws ({seeds}), beside the {n}² solves of "
        f"those draws interpolated onto {n4}²; target: mean >= {100 * C2_REDUCTION:.0f} % lower "
        f"than coarse data only, and below the coarse solves where they err by >= "
        f"{C2_SOLVE_ERROR}",
        ["family", *names, "coarse solves", "baseline",
         *[f"{a} − coarse data only (paired)" for a in names[1:]],
         *[f"{a} − coarse solves" for a in names[1:]]],
        rows,
    )  # fmt: skip


def show(parts: list[tuple[str, list[str], list[list[str]]]], console: Console) -> None:
    for title, header, rows in parts:
        table = Table(title=title, title_justify="left")
        for h in header:
            table.add_column(h)
        for row in rows:
            table.add_row(*row, *[""] * (len(header) - len(row)))
        console.print(table)


def markdown(parts: list[tuple[str, list[str], list[list[str]]]]) -> str:
    lines = []
    for title, header, rows in parts:
        lines += [f"{title}:", "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        lines += ["| " + " | ".join(row + [""] * (len(header) - len(row))) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def smoothed(points: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Steps and the running mean of the loss over a twentieth of the points (batches of
    different families differ by more than the trend)."""
    steps, loss = np.array(points, dtype=float).T
    w = max(1, len(loss) // 20)
    return steps[w - 1 :], np.convolve(loss, np.ones(w) / w, mode="valid")


def plot(result: dict[str, Any], out: Path) -> Path:
    """The training curves: one colour per variant, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {
        "a. universal vs specialists": ("universal", "specialist ", "full specialist", "fno "),
        "b. curriculum vs shuffled": ("curriculum", "shuffled"),
        "c. few samples: data only, self-improvement (+ targets), all solved": ("few ",),
        "c2. coarse data, the residual on fine draws": ("c2 ",),
    }
    by_seed = list(result["curves"].values())
    drawn = {
        title: [n for n in by_seed[0] if any(n.startswith(p) for p in prefixes)]
        for title, prefixes in panels.items()
    }
    drawn = {title: names for title, names in drawn.items() if names}  # the claims run
    fig, axes = plt.subplots(1, len(drawn), figsize=(16 * len(drawn) / 3, 4), squeeze=False)
    for ax, (title, names) in zip(axes[0], drawn.items(), strict=True):
        for k, name in enumerate(names):
            for s, curves in enumerate(by_seed):
                if curves.get(name):
                    label = name if s == 0 else None
                    ax.plot(*smoothed(curves[name]), color=f"C{k % 10}", label=label, lw=0.8)
        ax.set(
            title=title,
            xlabel="step",
            ylabel="training data loss (relative L2), running mean",
            yscale="log",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench-claims"))
    for name, default in asdict(Sizes()).items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    ap.add_argument("--width", type=int, help="model width (default: the quick-start's)")
    ap.add_argument(
        "--claims",
        default=",".join(CLAIMS),
        help="the claims to run, comma-separated, e.g. c,c2 (default: all)",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on 2 seeds: check the script")
    ap.add_argument(
        "--threads",
        type=int,
        help="CPU threads of every training stage, the FNOs and the evaluation (default: the "
        "stages' auto, every CPU; on a machine shared with other jobs 1 is several times faster "
        "for these small models)",
    )
    args = ap.parse_args()
    sizes = Sizes(**{k: getattr(args, k) for k in asdict(Sizes())})
    if args.smoke:  # tiny sizes, the arms asked for
        sizes = replace(Sizes.smoke(), a_arms=sizes.a_arms, c2_arms=sizes.c2_arms)
    claims = tuple(c.strip() for c in args.claims.split(","))
    if not args.claims or set(claims) - set(CLAIMS):
        ap.error(f"--claims {args.claims!r}: comma-separated names of {', '.join(CLAIMS)}")
    if sizes.seeds < 2:
        ap.error(f"--seeds {sizes.seeds}: the verdicts need a standard error, 2 seeds or more")
    model = {"width": 8, "modes": 3, "layers": 2} if args.smoke else None
    if args.width and model is None:
        model = {**quickstart()["model"], "width": args.width}
    args.out.mkdir(parents=True, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    with ray_session():
        result = run(sizes, args.out, model, args.threads or "auto", claims)
    result["wall_s"]["whole run"] = round(time.perf_counter() - t0, 1)
    parts = tables(result)
    show(parts, Console(width=200))
    (args.out / "claims.json").write_text(json.dumps(result, indent=2))
    (args.out / "claims.md").write_text(markdown(parts))
    print(
        f"claims: {args.out / 'claims.json'}, {args.out / 'claims.md'}; curves: {plot(result, args.out)}"
    )


if __name__ == "__main__":
    main()
