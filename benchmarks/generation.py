"""Generation throughput: samples/s with 1 and 2 Ray actors, and the pipeline's overhead.

The same stage (heat, 2D, 129 x 129, 11 snapshots, 24 samples: about 0.4 s per solve, the scale
of a real campaign's samples) is solved

1. in a plain loop in this process: ``family.run`` then the store write of its sample, each
   timed;
2. by :func:`pdeladder.curriculum.materialize` with 1 and with 2 actors, into fresh stores.

Steady-state rates use the time between the moment every actor has finished a sample and the
last finished sample (the actors' start-up, mostly importing DOLFINx, is reported apart).
Targets: 2 actors >= 1.7x one actor; the 1-actor pipeline within 10% of the plain loop (with
writes); the store's share of a sample's time in the campaign (the plain loop's write time a
sample over the pipeline's time a sample) <= 2%. Run with ``OMP_NUM_THREADS=1`` on an
otherwise idle machine with at least 2 cores::

    python benchmarks/generation.py [--samples 24] [--resolution 129]

The pipeline costs about 15 ms per sample (a Ray task round trip, the store's status and
progress records); on tiny solves (65 x 65, ~0.1 s) that is visible, on real ones it is not.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from mpi4py import MPI

from pdeladder.curriculum import ProgressEvent, materialize, parse_curriculum, plan_stage
from pdeladder.curriculum.worker import Solver, create_group
from pdeladder.dataset.store import open_store
from pdeladder.solvers import get_family

SPEC = """\
name: bench
seed: 1
stages:
  - name: s
    families:
      - family: heat
        dims: [2]
        resolutions: [{resolution}]
        samples: {samples}
        params:
          diffusivity: {{low: 0.002, high: 0.05, scale: log}}
"""


def plain_loop(spec, root: Path) -> tuple[float, float]:
    """Seconds per sample in one loop of what a worker's ``Solver.solve`` does: the solve
    (``family.run``) and the store write of its result (fields, records, status), each timed
    on its own, so that the write's share is measured, not the difference of two loops whose
    solves vary by more than it."""
    (group,) = plan_stage(spec, "s").groups
    fam = get_family(group.family)
    samples = list(group.samples())
    fam.run(fam.Params(**samples[0].params), group.grid, 0, MPI.COMM_SELF)  # compile the forms
    store = open_store(str(root / "loop.zarr"), mode="a")
    create_group(store, group, spec.name)
    written = Solver(store).group(group.path)
    solve = write = 0.0
    for s in samples:
        t0 = time.perf_counter()
        sample = fam.run(fam.Params(**s.params), s.grid, s.seed, MPI.COMM_SELF)
        t1 = time.perf_counter()
        written.write(s.index, sample)
        solve, write = solve + t1 - t0, write + time.perf_counter() - t1
    return solve / len(samples), write / len(samples)


def pipeline(spec, root: Path, workers: int) -> dict[str, float]:
    """Steady-state seconds per sample (once every actor has finished a sample) and start-up
    seconds of one materialize run."""
    stamps: list[float] = []

    def on_progress(event: ProgressEvent) -> None:
        stamps.append(time.perf_counter())

    t0 = time.perf_counter()
    summary = materialize(
        spec, store_url=str(root / f"w{workers}.zarr"), workers=workers, on_progress=on_progress
    )
    assert summary.ok == len(stamps) - 1, "every sample must solve"
    first, last = stamps[workers], stamps[-1]  # stamps[0] is the stage event
    return {
        "per_sample": (last - first) / (summary.ok - workers),
        "startup": first - t0,
        "total": time.perf_counter() - t0,
    }


def main() -> None:
    from pdeladder.ray_runtime import ray_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=24)
    parser.add_argument("--resolution", type=int, default=129)
    args = parser.parse_args()
    spec = parse_curriculum(SPEC.format(samples=args.samples, resolution=args.resolution))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        solve, write = plain_loop(spec, root)
        solve_write = solve + write
        print(f"heat 2D {args.resolution}^2, 11 snapshots, {args.samples} samples", flush=True)
        print(f"plain loop, solver only      {1 / solve:7.2f} samples/s", flush=True)
        print(f"plain loop, solver + write   {1 / solve_write:7.2f} samples/s", flush=True)
        with ray_session(num_cpus=2):  # the local runtime generation itself starts
            one = pipeline(spec, root, 1)
            two = pipeline(spec, root, 2)
    scaling = one["per_sample"] / two["per_sample"]
    overhead = one["per_sample"] / solve_write - 1
    for name, r in (("1 actor ", one), ("2 actors", two)):
        print(
            f"pipeline, {name}           {1 / r['per_sample']:7.2f} samples/s steady "
            f"(start-up {r['startup']:.1f} s, run {r['total']:.1f} s)"
        )
    print(f"scaling 2 vs 1 actor         {scaling:7.2f}x  (target >= 1.7x)")
    print(f"overhead vs loop with writes {overhead:+7.1%}  (target <= 10%)")
    print(f"overhead vs solver-only loop {one['per_sample'] / solve - 1:+7.1%}")
    # The store's part of a sample: what Solver.solve adds to family.run (the write of its
    # fields and records, its status), against a sample's whole time in the 1-actor campaign.
    share = write / one["per_sample"]
    print(f"store write                  {write * 1e3:7.2f} ms a sample")
    print(f"store's share of campaign    {share:7.1%}  (target <= 2%)")


if __name__ == "__main__":
    main()
