"""The curriculum's claims, measured (issue 14, item 4), in one run on the same solved data.

The quick-start's four 2D families (heat, Darcy, Burgers, advection-diffusion) with the
quick-start's parameter ranges, model and training settings (examples/quickstart.yaml: stage
``plane`` at 17² for ``coarse``, stage ``refine`` at 33² for ``fine``), solved once into one
store with ``materialize``; every variant is trained with ``train_curriculum`` (one worker, in
process) and scored with ``evaluate_checkpoint`` on the same held-out samples (the last
``--held-out`` of each group, at most 16), each nRMSE beside its trivial baseline (persistence
``u(t) = u(0)``; steady Darcy: the training samples' mean field).

a. **Universal vs specialists.** One model over the four families for ``--steps`` steps on
   ``coarse``, against one model per family with the same total parameters and steps: each
   specialist has about 1/F of the parameters (width / sqrt(F): the spectral weights, which
   dominate, grow as width²) and 1/F of the steps. So the totals are the universal model's, and
   every family gets as many batches (steps / F) in both arms: what differs is only whether the
   families share one model (a specialist step costs about 1/F of a universal one; wall times
   are printed). And against neuraloperator's FNO per family (hidden channels = the
   specialist's width, the same kept frequencies, inputs and normalised targets as ours; its
   own ``Trainer``, AdamW at our learning rate with cosine decay per epoch, relative L2 loss),
   for as many steps as the specialist (whole epochs). Target: universal <= the best of
   specialist and FNO on every family.
b. **Curriculum vs shuffled.** ``coarse`` (``--steps``) then ``fine`` (``--fine-steps``, warm
   start), against one run of ``--steps + --fine-steps`` steps on the same groups mixed from
   step 0 (``fine`` with ``training.replay: [coarse]``: exactly the curriculum's samples and
   held-out split). Target: curriculum <= shuffled on ``fine``'s held-out nRMSE (mean over the
   families).
c. **Self-improvement beyond the data.** ``--few`` solved samples per family at 17² (all
   trained on), ``--few-steps`` data steps then ``--si-steps`` residual steps on unsolved
   draws (the quick-start's self-improvement weights), against ``--few-steps + --si-steps``
   data-only steps; scored on ``coarse``'s samples (same ranges, draws the few-sample models
   never saw). Target: held-out nRMSE at least 10 % lower, mean over the families.
d. **Zero-shot super-resolution.** The universal model of a. (trained at 17²) on 33² solves of
   ``coarse``'s ranges (stage ``coarse2n``, never trained on). Target: nRMSE at 2N <= 1.2x
   that at N, per family.

Where a target is missed the table says "missed"; nothing here is tuned to a target.
``python benchmarks/claims.py [--out DIR]`` writes ``claims.json``, ``curves.png`` (training
data loss, relative L2 of the normalised fields, against the step, per variant) and the runs;
``--smoke`` runs tiny sizes to check the script.
"""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import argparse
import json
import math
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from rich.console import Console
from rich.table import Table

from pdeladder.curriculum.generation import materialize
from pdeladder.curriculum.loader import parse_curriculum
from pdeladder.dataset.catalog import Catalog
from pdeladder.dataset.loader import StoreDataset
from pdeladder.ray_runtime import ray_session
from pdeladder.trainer import evaluate_checkpoint, train_curriculum
from pdeladder.trainer.evaluate import baseline_prediction, group_report, mean_field
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.training.processor import DataProcessor

QUICKSTART = Path(__file__).parents[1] / "examples" / "quickstart.yaml"
FAMILIES = ("heat", "darcy", "burgers", "advection_diffusion")
#: Evaluation reads at most this many held-out samples per group (``evaluate_checkpoint``).
EVAL_SAMPLES = 16


@dataclass(frozen=True)
class Sizes:
    resolution: int = 17
    samples: int = 64  # solved per family in coarse and fine
    few: int = 8
    steps: int = 400  # universal / curriculum's coarse stage
    fine_steps: int = 200
    few_steps: int = 200
    si_steps: int = 100
    held_out: float = 0.25

    @classmethod
    def smoke(cls) -> "Sizes":
        return cls(9, 8, 4, 8, 4, 4, 4, 0.25)


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


def curriculum(name: str, stages: list[dict], model: dict, out: Path):
    """Parse the curriculum (written to ``out/<name>.yaml`` beside the runs)."""
    text = yaml.safe_dump({"name": name, "seed": 20240601, "model": model, "stages": stages})
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


def fno_specialist(store: str, path: str, width: int, model: dict, steps: int, sizes: Sizes):
    """neuraloperator's FNO on one group with its own Trainer: inputs and normalised targets
    as ours (``DataProcessor``), axes of one point dropped, the same kept frequencies
    (benchmarks/trainer.py); scored with ``group_report`` on the held-out samples that
    ``evaluate_checkpoint`` reads. Returns (report, curve, wall seconds, parameters)."""
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
        [{"x": a, "y": b} for a, b in zip(x, y, strict=True)], batch_size=batch_size, shuffle=True
    )
    epochs = max(1, round(steps / len(loader)))
    optimizer = torch.optim.AdamW(fno.parameters(), lr=3e-3, weight_decay=1e-4)
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


def verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def nb(r: dict) -> str:
    """``nRMSE / baseline``."""
    return f"{r['nrmse']:.3g} / {r['baseline_nrmse']:.3g}"


def mean_over(reports: dict[str, dict], key: str) -> float:
    return float(np.mean([r[key] for r in reports.values()]))


@dataclass
class Bench:
    """One run's shared state: sizes, store, stages, and what every variant cost."""

    sizes: Sizes
    out: Path
    model: dict
    stages: dict[str, dict]
    store: str
    snapshots: dict[str, int]
    walls: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)
    curves: dict[str, list] = field(default_factory=dict)

    def path(self, stage_name: str, family: str) -> str:
        res = self.sizes.resolution if stage_name in ("coarse", "few") else self.fine_resolution
        return f"{stage_name}/{family}/2d_n{res}_t{self.snapshots[family]}"

    @property
    def fine_resolution(self) -> int:
        return 2 * self.sizes.resolution - 1  # twice the cells: 17 -> 33

    def train(self, name: str, spec, stages=None, held_out=None) -> Path:
        """Train ``spec``'s ``stages`` into the run folder of ``spec``; record the variant
        ``name``'s wall time, steps, parameters and curve; the last stage's model folder."""
        run_dir = self.out / "runs" / spec.name
        chosen = [spec.stage(n) for n in stages] if stages else spec.stages
        for s in chosen:  # fresh stages: one-worker stages resume what an earlier run left
            shutil.rmtree(run_dir / "stages" / s.name, ignore_errors=True)
        if chosen[0].name == spec.stages[0].name:  # a new run: its metrics start over
            (run_dir / "metrics.jsonl").unlink(missing_ok=True)
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
        return result.checkpoint

    def scores(self, checkpoint: Path) -> dict[str, dict]:
        """``evaluate_checkpoint``'s group reports by group path."""
        return evaluate_checkpoint(checkpoint, self.store, held_out=self.sizes.held_out)["groups"]


def setup(sizes: Sizes, out: Path, model: dict | None) -> Bench:
    """The stages from the quick-start's, solved into ``out/store.zarr``."""
    qs = quickstart()
    model = model or qs["model"]
    n, n2 = sizes.resolution, 2 * sizes.resolution - 1
    plane, refine = qs["plane"], qs["refine"]
    si = refine["training"]["self_improvement"] | {"steps": sizes.si_steps}
    stages = {
        "coarse": stage("coarse", plane, n, sizes.samples, steps=sizes.steps),
        "fine": stage(
            "fine", refine, n2, sizes.samples, steps=sizes.fine_steps, self_improvement=None
        ),
        "coarse2n": stage("coarse2n", plane, n2, EVAL_SAMPLES, steps=1),
        "few": stage("few", plane, n, sizes.few, steps=sizes.few_steps, self_improvement=si),
    }
    store = str((out / "store.zarr").absolute())
    t0 = time.perf_counter()
    solved = curriculum("claims", list(stages.values()), model, out)
    materialize(solved, store_url=store)
    snapshots = {e.family: g.snapshots for e, g in solved.stages[0].groups()}
    bench = Bench(sizes, out, model, stages, store, snapshots)
    bench.walls["solve (all stages)"] = time.perf_counter() - t0
    return bench


def with_training(stage_dict: dict, **training) -> dict:
    """The stage with its training settings updated (a ``None`` drops the key)."""
    tr = {k: v for k, v in {**stage_dict["training"], **training}.items() if v is not None}
    return {**stage_dict, "training": tr}


def curriculum_and_shuffled(bench: Bench) -> tuple[Path, Path, Path]:
    """b.'s two variants; the curriculum's first stage is a.'s universal model. Returns the
    model folders (universal, curriculum, shuffled)."""
    coarse, fine, s = bench.stages["coarse"], bench.stages["fine"], bench.sizes
    spec = curriculum("curriculum", [coarse, fine], bench.model, bench.out)
    universal = bench.train("universal", spec, ["coarse"])
    final = bench.train("curriculum fine stage", spec, ["fine"])  # warm start from coarse
    mixed = with_training(fine, steps=s.steps + s.fine_steps, replay=["coarse"])
    spec = curriculum("shuffled", [coarse, mixed], bench.model, bench.out)
    return universal, final, bench.train("shuffled", spec, ["fine"])


def specialists(bench: Bench) -> tuple[dict[str, dict], dict[str, dict], int]:
    """a.'s specialists and FNOs: held-out group reports by family, and the width."""
    families = list(bench.snapshots)
    width = max(1, round(bench.model["width"] / math.sqrt(len(families))))
    steps = max(1, bench.sizes.steps // len(families))
    ours, fno = {}, {}
    for f in families:
        coarse = bench.stages["coarse"]
        part = with_training(
            {**coarse, "families": [e for e in coarse["families"] if e["family"] == f]},
            steps=steps,
        )
        spec = curriculum(f"specialist-{f}", [part], {**bench.model, "width": width}, bench.out)
        ours[f] = bench.scores(bench.train(f"specialist {f}", spec))[bench.path("coarse", f)]
        name = f"fno {f}"
        fno[f], bench.curves[name], bench.walls[name], bench.params[name] = fno_specialist(
            bench.store, bench.path("coarse", f), width, bench.model, steps, bench.sizes
        )
        bench.steps[name] = len(bench.curves[name])
    return ours, fno, width


def few_samples(bench: Bench) -> dict[str, dict[str, dict]]:
    """c.'s variants at equal steps: reports on ``coarse``'s draws by variant and family."""
    few, s = bench.stages["few"], bench.sizes
    out = {}
    for variant, part in (
        ("data only", with_training(few, steps=s.few_steps + s.si_steps, self_improvement=None)),
        ("self-improvement", few),
    ):
        spec = curriculum(f"few-{variant.replace(' ', '-')}", [part], bench.model, bench.out)
        groups = bench.scores(bench.train(f"few {variant}", spec, held_out=0.0))
        out[variant] = {f: groups[bench.path("coarse", f)] for f in bench.snapshots}
    return out


def run(sizes: Sizes, out: Path, model: dict | None) -> dict[str, Any]:
    bench = setup(sizes, out, model)
    fam = list(bench.snapshots)
    universal_dir, curriculum_dir, shuffled_dir = curriculum_and_shuffled(bench)
    universal = bench.scores(universal_dir)
    final, shuffled = bench.scores(curriculum_dir), bench.scores(shuffled_dir)
    specialist, fno, width = specialists(bench)
    few = few_samples(bench)
    held = {f: universal[bench.path("coarse", f)] for f in fam}
    a = {
        f: {
            "universal": held[f],
            "specialist": specialist[f],
            "fno": fno[f],
            "met": held[f]["nrmse"] <= min(specialist[f]["nrmse"], fno[f]["nrmse"]),
        }
        for f in fam
    }
    b = {"families": {f: {"curriculum": final[bench.path("fine", f)],
                          "shuffled": shuffled[bench.path("fine", f)]} for f in fam}}  # fmt: skip
    for who in ("curriculum", "shuffled"):
        b[who] = float(np.mean([r[who]["nrmse"] for r in b["families"].values()]))
    b["met"] = b["curriculum"] <= b["shuffled"]
    c = {"families": {f: {v: few[v][f] for v in few} for f in fam}}
    for who in few:
        c[who] = float(np.mean([r[who]["nrmse"] for r in c["families"].values()]))
    c["reduction"] = 1 - c["self-improvement"] / c["data only"]
    c["met"] = c["reduction"] >= 0.10
    d = {f: {"n": held[f], "2n": universal[bench.path("coarse2n", f)]} for f in fam}
    for r in d.values():
        r["ratio"] = r["2n"]["nrmse"] / r["n"]["nrmse"]
        r["met"] = r["ratio"] <= 1.2
    bench.walls["curriculum"] = bench.walls["universal"] + bench.walls["curriculum fine stage"]
    bench.steps["curriculum"] = bench.steps["universal"] + bench.steps["curriculum fine stage"]
    bench.params["curriculum"] = bench.params["curriculum fine stage"]
    bench.curves["curriculum"] = bench.curves.pop("curriculum fine stage")  # both stages
    return {
        "sizes": asdict(sizes),
        "model": bench.model,
        "specialist_width": width,
        "params": bench.params,
        "steps": bench.steps,
        "wall_s": {k: round(v, 1) for k, v in bench.walls.items()},
        "claims": {"a": a, "b": b, "c": c, "d": d},
        "curves": bench.curves,
    }


def cell(r: dict, key: str = "nrmse") -> str:
    return f"{r[key]:.3g}"


def tables(result: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The claims as ``(title, header, rows)`` tables: each nRMSE beside its trivial baseline
    on the same samples."""
    cl, n = result["claims"], result["sizes"]["resolution"]
    out = []
    rows = [
        [f, cell(a["universal"]), cell(a["specialist"]), cell(a["fno"]),
         cell(a["universal"], "baseline_nrmse"), verdict(a["met"])]
        for f, a in cl["a"].items()
    ]  # fmt: skip
    out.append((
        "a. universal vs specialists (same total parameters and steps) and neuraloperator's FNO",
        ["family", "universal", "specialist", "FNO", "baseline", "universal <= best"],
        rows,
    ))  # fmt: skip
    b = cl["b"]
    rows = [
        [f, cell(r["curriculum"]), cell(r["shuffled"]), cell(r["curriculum"], "baseline_nrmse")]
        for f, r in b["families"].items()
    ]
    base = float(np.mean([r["curriculum"]["baseline_nrmse"] for r in b["families"].values()]))
    rows.append(["mean", f"{b['curriculum']:.3g}", f"{b['shuffled']:.3g}", f"{base:.3g}",
                 verdict(b["met"])])  # fmt: skip
    out.append((
        f"b. curriculum vs shuffled: held-out nRMSE on the last stage ({2 * n - 1}²)",
        ["family", "curriculum", "shuffled", "baseline", "curriculum <= shuffled"],
        rows,
    ))  # fmt: skip
    c = cl["c"]
    rows = [
        [f, cell(r["data only"]), cell(r["self-improvement"]), cell(r["data only"], "baseline_nrmse"),
         f"{cell(r['data only'], 'residual')} / {cell(r['self-improvement'], 'residual')}"]
        for f, r in c["families"].items()
    ]  # fmt: skip
    base = float(np.mean([r["data only"]["baseline_nrmse"] for r in c["families"].values()]))
    rows.append(["mean", f"{c['data only']:.3g}", f"{c['self-improvement']:.3g}", f"{base:.3g}",
                 "", f"{100 * c['reduction']:.1f} % lower: {verdict(c['met'])}"])  # fmt: skip
    out.append((
        f"c. {result['sizes']['few']} solved samples per family: data only vs self-improvement, "
        "nRMSE on unseen draws",
        ["family", "data only", "self-improvement", "baseline", "residual (data only / SI)",
         ">= 10 % lower"],
        rows,
    ))  # fmt: skip
    rows = [
        [f, cell(d["n"]), cell(d["n"], "baseline_nrmse"), cell(d["2n"]),
         cell(d["2n"], "baseline_nrmse"), f"{d['ratio']:.2f}x", verdict(d["met"])]
        for f, d in cl["d"].items()
    ]  # fmt: skip
    out.append((
        f"d. zero-shot super-resolution: trained at {n}², evaluated at {2 * n - 1}²",
        ["family", f"{n}²", "baseline", f"{2 * n - 1}²", "baseline", "ratio", "<= 1.2x"],
        rows,
    ))  # fmt: skip
    rows = [
        [k, str(result["steps"].get(k, "")), str(result["params"].get(k, "")), f"{v:.0f}"]
        for k, v in result["wall_s"].items()
    ]
    out.append(("compute per variant", ["variant", "steps", "parameters", "wall s"], rows))
    return out


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {
        "a. universal vs specialists (steps/F each)": ("universal", "specialist ", "fno "),
        "b. curriculum vs shuffled": ("curriculum", "shuffled"),
        "c. few samples: data only vs self-improvement": ("few ",),
    }
    fig, axes = plt.subplots(1, len(panels), figsize=(16, 4))
    for ax, (title, prefixes) in zip(axes, panels.items(), strict=True):
        for name, pts in result["curves"].items():
            if pts and any(name.startswith(p) for p in prefixes):
                ax.plot(*smoothed(pts), label=name, lw=1)
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
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args()
    sizes = Sizes.smoke() if args.smoke else Sizes(**{k: getattr(args, k) for k in asdict(Sizes())})
    model = {"width": 8, "modes": 3, "layers": 2} if args.smoke else None
    if args.width and model is None:
        model = {**quickstart()["model"], "width": args.width}
    args.out.mkdir(parents=True, exist_ok=True)
    with ray_session():
        result = run(sizes, args.out, model)
    parts = tables(result)
    show(parts, Console(width=160))
    (args.out / "claims.json").write_text(json.dumps(result, indent=2))
    (args.out / "claims.md").write_text(markdown(parts))
    print(
        f"claims: {args.out / 'claims.json'}, {args.out / 'claims.md'}; curves: {plot(result, args.out)}"
    )


if __name__ == "__main__":
    main()
