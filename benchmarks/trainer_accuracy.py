"""Trainer accuracy benchmark (not a CI test): held-out nRMSE on 2D heat within a CPU budget,
and what self-improvement does to the held-out residual and nRMSE.

Targets: held-out nRMSE <= 5e-2 after at most 10 CPU-minutes of training; the self-improvement
phase lowers the held-out relative PDE residual without raising the held-out nRMSE.

One stage of 2D heat (``--resolution`` points per axis, 17 as in the quick-start curriculum's
2D stage; 11 snapshots; ``--samples`` solver samples, 10 % held out) is materialized with ``pdeladder.curriculum.materialize`` on Ray actors,
then trained with ``train_curriculum`` (``--workers`` Ray Train workers, supervised steps, then
self-improvement steps on unsolved samples of the same distribution), and evaluated with
``evaluate_checkpoint``. CPU time is the training stage's wall time times its workers (one
thread each). ``python benchmarks/trainer_accuracy.py [--steps N] [--si-steps N] [--out DIR]``;
``--smoke`` runs a few steps on a tiny grid to check the script itself.
"""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import argparse
import json
import time
from pathlib import Path

from pdeladder.curriculum.generation import materialize
from pdeladder.curriculum.loader import parse_curriculum
from pdeladder.trainer import evaluate_checkpoint, train_curriculum

CURRICULUM = """
name: heat2d-accuracy
seed: 11
model: {{width: {width}, modes: {modes}, layers: 4}}
stages:
  - name: heat2d
    families:
      - family: heat
        dims: [2]
        resolutions: [{resolution}]
        samples: {samples}
        snapshots: 11
        params:
          diffusivity: {{low: 0.003, high: 0.03, scale: log}}
          ic_length_scale: [0.15, 0.4]
    training:
      steps: {steps}
      batch_size: {batch}
      learning_rate: {{initial: 0.003, schedule: cosine, final: 0.00005, warmup_steps: 20}}
      self_improvement:
        steps: {si_steps}
        samples: 32
        residual_weight: 0.1
        data_anchor_weight: 1.0
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("runs/bench-trainer-accuracy"))
    ap.add_argument("--resolution", type=int, default=17)
    ap.add_argument("--samples", type=int, default=120)
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--si-steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--modes", type=int, default=6)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args()
    if args.smoke:
        args.resolution, args.samples, args.steps, args.si_steps = 9, 12, 6, 2
        args.batch, args.width, args.modes = 2, 8, 3
    args.out.mkdir(parents=True, exist_ok=True)
    text = CURRICULUM.format(**vars(args))
    path = args.out / "curriculum.yaml"
    path.write_text(text)
    spec = parse_curriculum(text, str(path))
    store = str(args.out / "store")

    t0 = time.perf_counter()
    materialize(spec, store_url=store, workers=args.workers)
    t_data = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = train_curriculum(
        spec,
        store_url=store,
        workers=args.workers,
        run_dir=args.out / "run",
        checkpoint_every=max(100, args.steps // 4),
        log_every=25,
        progress=False,
    )
    t_train = time.perf_counter() - t0
    report = evaluate_checkpoint(result.checkpoint, store, args.out / "eval")

    m = result.metrics
    before = {k: m[f"held_out_{k}_before"] for k in ("nrmse", "residual")}
    after = {k: m[f"held_out_{k}_after"] for k in ("nrmse", "residual")}
    group = next(iter(report["groups"].values()))
    cpu_min = t_train * args.workers / 60
    summary = {
        "data_s": round(t_data, 1),
        "train_s": round(t_train, 1),
        "train_cpu_min": round(cpu_min, 2),
        "held_out_before_self_improvement": before,
        "held_out_after_self_improvement": after,
        "evaluate_nrmse": group["nrmse"],
        "evaluate_residual": group["residual"],
        "residual_of_data": group["residual_of_data"],
        "targets": {
            "nrmse_le_5e-2": after["nrmse"] <= 5e-2,
            "within_10_cpu_min": cpu_min <= 10,
            "self_improvement_lowers_residual": after["residual"] < before["residual"],
            "self_improvement_keeps_nrmse": after["nrmse"] <= before["nrmse"],
        },
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    print(f"report: {args.out / 'eval' / 'report.md'}; curves: {args.out / 'run'}/loss_curves.png")


if __name__ == "__main__":
    main()
