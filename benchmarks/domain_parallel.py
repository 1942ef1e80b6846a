"""Domain-parallel benchmark, one run: one training sample split over ``k`` gloo processes.

``python benchmarks/domain_parallel.py [--size 128] [--steps 3] [--timing-only]``. For a fixed
2D sample ``(T, X, Y) = (11, size, size)`` (width 16, 4 Fourier layers, 25 % padding, batch 1,
activation checkpointing, FSDP2 over the ranks) it measures, for ``k = 1, 2, 4`` domain ranks:

- each rank's peak tensor memory, counted as the CUDA allocator's peak counts it on a GPU (live
  tensor bytes; no interpreter, libraries or allocator cache): the tensors the rank holds
  between steps (its parameter and optimizer shards, its slab of the sample) plus the peak of the
  bytes the CPU allocator hands out during one step (the profiler's memory events, "Total
  Allocated"), beside the memory model's prediction
  (:func:`pdeladder.trainer.distributed.memory.peak_bytes`) and the raw resident figures (peak
  RSS, and peak RSS less the RSS before the first step, which holds library pages touched and
  heap kept by the C allocator: not comparable with a GPU's peak); target ``peak(k) ≤ 1.15 ·
  peak(1) / k`` plus the rank's parameter and optimizer shard;
- the bytes each rank hands to the spectral layers' all-reduce (split around the mixing) per
  forward pass, against the formula ``8 · B · width · M`` per layer (a ring all-reduce moves
  ``2 (k-1)/k`` of it), at this size and at twice the size (it must not change);
- the step time, ``k = 2`` against ``k = 1`` on the same sample (target ≥ 1.6x on two cores),
  with FSDP2 over all ranks and with the parameters replicated over the domain ranks, against
  the one-worker step training takes for a sample that fits (parameters held whole, no FSDP);
  every rank, ``k = 1`` too, runs one thread and the training loop's fused AdamW. Beside the
  wall time, each rank's process CPU time per step over the ``k = 1`` step's (the target read
  as CPU: ≤ 0.6x; other processes on the cores stretch the wall time, hardly the CPU time) and
  the load average (the wall figure counts where it is below 1.5). ``--timing-only`` runs
  ``k = 1``, ``k = 2`` and the machine's ceiling for ``k = 2`` alternately ``--rounds`` times
  and keeps each one's fastest round. The ceiling is what a perfect ``k = 2`` could reach on
  these cores: two processes started together, each training the model alone (parameters
  whole, no communication) on a sample of a ``k = 2`` slab's shape (at ``--size 128`` the
  same padded shape and kept modes as a slab); it prints the ``k = 2`` speed-up, the
  ceiling's and the fraction of it reached;
- in one process, disk offload against checkpointing alone (target ≤ 1.10x the step time).

``--compare`` instead times ``k = 2`` in each of the four ways of holding the parameters and
mixing the kept modes (``--shard`` × ``--mixing``), the ceiling, and the ceiling in lock step
(its two processes wait for each other where a split sample's spectral all-reduces run, and
send nothing), one after the other, for ``--rounds`` rounds, and prints each way's mean step
time with its standard error and the ceiling's mean over it.

``--weak`` instead measures weak scaling: ``k = 1, 2, 4`` domain ranks on a sample grown with
``k`` along x, ``(T, k · size, size)``, so that every rank holds a slab of the same shape; per
rank, the peak tensor memory (as above; target: flat within 10 % of ``k = 1``'s) beside the
memory model's prediction, and the step time (``k = 4`` shares the 2 cores four ways: its
time is printed, not a target).

It prints a table of ratios, writes ``domain_parallel.json`` and a PNG of memory per rank to
``--out`` (default ``runs/bench``).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

WIDTH, LAYERS, MODES, T = 16, 4, (4, 8, 8, 1), 11


def config():
    from pdeladder.trainer.models.operator import OperatorConfig

    return OperatorConfig(4, 2, width=WIDTH, layers=LAYERS, modes=MODES, families=1)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def held_mb(*tensors: torch.Tensor) -> float:
    """MiB of the distinct storages behind ``tensors`` (FSDP shards: their local storage)."""
    storages = {}
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values()) / 2**20


def allocated_peak_mb(step, trace: str) -> float:
    """Peak MiB of CPU tensors allocated during ``step()`` and alive at once (tensors allocated
    before it, e.g. parameters, are not counted)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    prof.export_chrome_trace(trace)
    events = json.loads(Path(trace).read_text())["traceEvents"]
    Path(trace).unlink()
    totals = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    return max(totals, default=0) / 2**20


def rank_main(
    rank: int,
    world_size: int,
    init: str,
    out: str,
    size: int,
    steps: int,
    shard: str,
    x: int,
    mixing: str,
) -> None:
    """One rank: ``steps`` training steps on its slab of a ``(T, x, size, 1)`` sample; writes
    its figures to ``out.rank``."""
    import torch.distributed as dist

    from pdeladder.curriculum.settings import LearningRate
    from pdeladder.slabs import DomainTiling
    from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
    from pdeladder.trainer.layers.fft import ModeSelection
    from pdeladder.trainer.models.operator import LadderOperator
    from pdeladder.trainer.training.loop import adamw

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    cfg = config()
    tiling = DomainTiling(x=world_size, padding=cfg.padding)
    grid = (T, x, size, 1)
    synced = shard == "alone_synced"
    if shard.startswith("alone"):  # the ceiling: alone on a sample of this rank's slab's shape
        # (the process group only starts the steps together, or also syncs the spectral layers)
        grid, world_size, tiling = tiling.slab(grid, rank).local_shape, 1, DomainTiling()
    shard = (
        "none" if world_size == 1 else shard
    )  # one worker: parameters whole, as training holds them
    dims = ParallelDims.of(world_size, tiling, shard, mixing)
    domain = dims.build("cpu")[1] if world_size > 1 else None
    torch.manual_seed(0)
    model = LadderOperator(cfg)
    model.checkpointing = True
    if synced:
        for block in model.blocks:
            block.spectral.transform = synced_fft()
    model = parallelize(model, dims, domain, torch.device("cpu"))
    opt = adamw(model.parameters(), LearningRate().initial)
    slab = domain.slab(grid) if domain else None
    local = slab.local_shape if slab else grid
    x = torch.randn(1, cfg.in_channels, *local)
    family = torch.zeros(1, dtype=torch.long)

    def step():
        loss = model(x, family, slab).square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    before = rss_mb()
    times, cpu = [], []
    for _ in range(steps + 1):  # the first step warms up (lazy buffers, FFT plans); not timed
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        cpu.append(time.process_time() - c0)
        dist.barrier()
        times.append(time.perf_counter() - t0)
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    states = [v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]
    shard_mb = held_mb(*model.parameters(), *states)
    step_peak = allocated_peak_mb(step, f"{out}.{rank}.trace.json")
    sent = 0
    if domain is not None:
        domain.sent.clear()
        with torch.no_grad():
            model(x, family, slab)
        sent = domain.sent["all_reduce"]
    pad = tuple(round(cfg.padding * n + 0.4999) if n > 1 else 0 for n in grid)
    kept = ModeSelection.of(tuple(n + p for n, p in zip(grid, pad, strict=True)), cfg.modes)
    m = 1
    for n in kept.block_shape:
        m *= n
    result = {
        "tensor_peak_mb": shard_mb + held_mb(x, family) + step_peak,
        "shard_mb": shard_mb,
        "rss_peak_mb": rss_peak,
        "rss_above_start_mb": rss_peak - before,
        "step_s": sorted(times[1:])[len(times[1:]) // 2],
        "cpu_s": sorted(cpu[1:])[len(cpu[1:]) // 2],
        "threads": torch.get_num_threads(),
        "forward_bytes": sent,
        "formula_bytes": 8 * 1 * WIDTH * m * LAYERS if world_size > 1 else 0,
    }
    Path(f"{out}.{rank}").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


class _Barrier(torch.autograd.Function):
    """Identity that waits for the other ranks, forward and backward (a one-number all-reduce)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        dist.all_reduce(torch.zeros(1))
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        dist.all_reduce(torch.zeros(1))
        return grad


def synced_fft():
    """The one-process transform, its kept block passed through a wait for the other ranks
    where a split sample's all-reduce runs: the ceiling's processes in lock step, nothing sent."""
    from pdeladder.trainer.layers.fft import LocalFFT

    class SyncedFFT(LocalFFT):
        def forward(self, x, sel, slab=None):
            return _Barrier.apply(super().forward(x, sel, slab))

    return SyncedFFT()


def run_ranks(
    k: int,
    size: int,
    steps: int,
    folder: str,
    shard: str = "all",
    x: int | None = None,
    mixing: str = "whole",
) -> list[dict]:
    """``k`` rank processes on one ``(T, x, size)`` sample (``x`` = ``size`` by default),
    FSDP2 over ``shard`` ("all" ranks or "dp"), the kept modes mixed as ``mixing`` says; or,
    with ``shard="alone"``, each on a sample of its slab's shape by itself (the ceiling)."""
    tag = f"{k}-{size}-{shard}-{time.monotonic_ns()}"  # a fresh rendezvous file each run
    init, out = f"file://{folder}/rdv-{tag}", f"{folder}/out-{tag}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [init, out, str(size), str(steps), shard, str(x or size), mixing]
    procs = [
        subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(k), *args], env=env)
        for r in range(k)
    ]
    if any(p.wait() for p in procs):
        raise SystemExit(f"a rank of k={k} failed")
    return [json.loads(Path(f"{out}.{r}").read_text()) for r in range(k)]


def offload_ratio(size: int, steps: int) -> float:
    """Step time with disk offload over checkpointing alone, one process, interleaved."""
    from pdeladder.trainer.models.operator import LadderOperator

    torch.set_num_threads(1)
    x = torch.randn(1, 4, T, size, size, 1)
    family = torch.zeros(1, dtype=torch.long)
    best = {"none": float("inf"), "disk": float("inf")}
    for _ in range(steps):
        for mode in best:
            torch.manual_seed(0)
            model = LadderOperator(config())
            model.checkpointing, model.offload = True, mode
            t0 = time.perf_counter()
            model(x, family).square().sum().backward()
            best[mode] = min(best[mode], time.perf_counter() - t0)
    return best["disk"] / best["none"]


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted(results["memory"], key=int)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, k in enumerate(ks):
        peaks = results["memory"][k]["tensor_peak_mb"]
        ax.bar([i * 5 + r for r in range(len(peaks))], peaks, color="C0")
        ends = (i * 5 - 0.4, i * 5 + len(peaks) - 0.6)
        ax.hlines(results["memory"][k]["predicted_mb"], *ends, "C1", label="memory model")
        ax.hlines(results["memory"][k]["target_mb"], *ends, "C3", "dashed", label="target")
    ax.set_xticks([i * 5 + (int(k) - 1) / 2 for i, k in enumerate(ks)], [f"k = {k}" for k in ks])
    ax.set_ylabel("peak tensor memory per rank (MiB)")
    ax.set_title(f"one 2D sample {T}×{results['size']}²: bars, each rank")
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[:2], labels[:2])
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def timing(rounds: list[dict], name: str) -> dict:
    """Step time and process CPU time per step, ``k = 2`` (its slowest rank) against ``k = 1``,
    and, where the rounds hold it, the ceiling (``"alone"``) against both, each from its
    fastest of ``rounds``."""
    runs = [k for k in (1, 2, "alone") if k in rounds[0]]
    wall = {k: min(max(r["step_s"] for r in ranks[k]) for ranks in rounds) for k in runs}
    cpu = {k: min(max(r["cpu_s"] for r in ranks[k]) for ranks in rounds) for k in runs}
    threads = sorted({r["threads"] for ranks in rounds for rs in ranks.values() for r in rs})
    load = os.getloadavg()[0]
    result = {
        "wall_s": wall,
        "cpu_s": cpu,
        "speedup": wall[1] / wall[2],
        "cpu_ratio": cpu[2] / cpu[1],
        "load_average": load,
    }
    quiet = "quiet" if load < 1.5 else "not quiet, does not count"
    print(
        f"k=2 / k=1, {name}: CPU time per rank {result['cpu_ratio']:.2f}x (target <= 0.6x; "
        f"{cpu[2]:.3f} s / {cpu[1]:.3f} s); wall speedup {result['speedup']:.2f}x "
        f"(target >= 1.6x; {wall[1]:.3f} s / {wall[2]:.3f} s; {quiet}: load average "
        f"{load:.1f}); threads per rank {threads}"
    )
    if "alone" in runs:
        result |= {
            "ceiling_speedup": wall[1] / wall["alone"],
            "ceiling_cpu_ratio": cpu["alone"] / cpu[1],
            "fraction_of_ceiling": wall["alone"] / wall[2],
        }
        print(
            f"ceiling for k=2 (two processes alone on slab-shaped samples, no communication): "
            f"wall speedup {result['ceiling_speedup']:.2f}x ({wall['alone']:.3f} s), CPU time "
            f"per process {result['ceiling_cpu_ratio']:.2f}x ({cpu['alone']:.3f} s); k=2 "
            f"reaches {result['fraction_of_ceiling']:.2f} of the ceiling's speedup ({quiet})"
        )
    return result


def compare(size: int, steps: int, rounds: int, folder: str) -> None:
    """``k = 2`` held and mixed each way, the ceiling and the ceiling in lock step, interleaved
    for ``rounds`` rounds: mean step time (slowest rank) ± its standard error, and each
    ceiling's mean over it."""
    import statistics

    ways = [(s, m) for s in ("dp", "all") for m in ("whole", "share")]
    ways += [("alone", "whole"), ("alone_synced", "whole")]
    steps_s = {way: [] for way in ways}
    for r in range(rounds):
        for shard, mixing in ways:
            ranks = run_ranks(2, size, steps, folder, shard, mixing=mixing)
            steps_s[shard, mixing].append(max(rank["step_s"] for rank in ranks))
        print(f"round {r + 1}/{rounds}, load average {os.getloadavg()[0]:.1f}", flush=True)
    ceiling = statistics.mean(steps_s["alone", "whole"])
    lock_step = statistics.mean(steps_s["alone_synced", "whole"])
    held = {
        "dp": "whole on each rank",
        "all": "sharded (FSDP2)",
        "alone": "(the ceiling)",
        "alone_synced": "(ceiling in lock step)",
    }
    print("k = 2 parameters        mixing  step s (mean ± SE)  ceiling / step  in lock step / step")
    for (shard, mixing), times in steps_s.items():
        mean, se = statistics.mean(times), statistics.stdev(times) / len(times) ** 0.5
        print(
            f"{held[shard]:<22}  {mixing:<6}  {mean:.4f} ± {se:.4f}     {ceiling / mean:.3f}"
            f"           {lock_step / mean:.3f}"
        )


def weak(size: int, steps: int, folder: str) -> None:
    """Weak scaling: ``k = 1, 2, 4`` ranks on ``(T, k · size, size)``, one table."""
    from pdeladder.slabs import DomainTiling
    from pdeladder.trainer.distributed.memory import peak_bytes

    print("k  sample (T, X, Y)   tensors per rank (max, MiB)  vs k = 1  model  step s  load")
    base = None
    for k in (1, 2, 4):
        ranks = run_ranks(k, size, steps, folder, x=k * size)
        peak = max(r["tensor_peak_mb"] for r in ranks)
        base = base or peak
        grid = (T, k * size, size, 1)
        tiling = DomainTiling(x=k, padding=config().padding)
        predicted = peak_bytes(config(), grid, 2, 1, tiling, k, True) / 2**20
        step = max(r["step_s"] for r in ranks)
        print(
            f"{k}  {grid[:3]!s:<17}  {peak:27.1f}  {peak / base:7.3f}x  {predicted:5.1f}  "
            f"{step:6.3f}  {os.getloadavg()[0]:4.1f}"
        )
    print("target: tensors per rank within 10 % of k = 1's")


def main() -> None:
    if sys.argv[1:2] == ["--rank"]:
        r, k, init, out, size, steps, shard, x, mixing = sys.argv[2:11]
        rank_main(int(r), int(k), init, out, int(size), int(steps), shard, int(x), mixing)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    parser.add_argument(
        "--timing-only", action="store_true", help="only time k = 1 against k = 2 (no files)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="--timing-only, --compare: rounds")
    parser.add_argument(
        "--shard",
        choices=("all", "dp"),
        default="dp",
        help="--timing-only: k = 2's parameters replicated over the domain ranks (training's "
        "choice when they fit) or sharded over all ranks (FSDP2)",
    )
    parser.add_argument(
        "--mixing",
        choices=("whole", "share"),
        default="whole",
        help="--timing-only: every rank mixes the whole kept block (training's choice for this "
        "sample) or each its share",
    )
    parser.add_argument(
        "--weak", action="store_true", help="weak scaling: k = 1, 2, 4 on a sample grown with k"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="k = 2 in each way of holding the parameters and mixing, against the ceiling",
    )
    args = parser.parse_args()
    from pdeladder.slabs import DomainTiling
    from pdeladder.trainer.distributed.memory import peak_bytes

    print(f"sample (T, X, Y) = ({T}, {args.size}, {args.size}), width {WIDTH}, {LAYERS} layers")
    print(f"load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as folder:
        if args.timing_only:
            rounds = [
                {
                    k: run_ranks(k, args.size, args.steps, folder, args.shard, mixing=args.mixing)
                    for k in (1, 2)
                }
                | {"alone": run_ranks(2, args.size, args.steps, folder, shard="alone")}
                for _ in range(args.rounds)
            ]
            shard = {"all": "FSDP2 over all", "dp": "replicated over the domain"}[args.shard]
            timing(rounds, f"{shard}, {args.mixing} mixing")
            return
        if args.weak:
            weak(args.size, args.steps, folder)
            return
        if args.compare:
            compare(args.size, args.steps, args.rounds, folder)
            return
        runs = {k: run_ranks(k, args.size, args.steps, folder) for k in (1, 2, 4)}
        double = run_ranks(2, 2 * args.size, 1, folder)
        replicated = run_ranks(2, args.size, args.steps, folder, shard="dp")
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"size": args.size, "memory": {}}
    base = max(r["tensor_peak_mb"] for r in runs[1])
    print(
        "peak per rank (MiB): tensors = held between steps + the step's allocator peak (as a GPU "
        "allocator's peak); RSS raw, and above the RSS before the first step"
    )
    print(
        "k  tensors (max)  vs peak(1)/k  target  model  model/tensors  RSS peak  RSS above  "
        "comm vs formula"
    )
    for k, ranks in runs.items():
        tiling = DomainTiling(x=k, padding=config().padding)
        grid = (T, args.size, args.size, 1)
        predicted = peak_bytes(config(), grid, 2, 1, tiling, k, True) / 2**20
        peak = max(r["tensor_peak_mb"] for r in ranks)
        target = 1.15 * base / k + max(r["shard_mb"] for r in ranks)
        comm = ranks[0]["forward_bytes"] / max(ranks[0]["formula_bytes"], 1)
        results["memory"][str(k)] = {
            "tensor_peak_mb": [r["tensor_peak_mb"] for r in ranks],
            "rss_peak_mb": [r["rss_peak_mb"] for r in ranks],
            "rss_above_start_mb": [r["rss_above_start_mb"] for r in ranks],
            "predicted_mb": predicted,
            "predicted_vs_measured": predicted / peak,
            "target_mb": target,
            "ratio_to_ideal": peak / (base / k),
            "comm_vs_formula": comm if k > 1 else None,
        }
        rss = max(r["rss_peak_mb"] for r in ranks)
        above = max(r["rss_above_start_mb"] for r in ranks)
        print(
            f"{k}  {peak:8.1f}       {peak / (base / k):5.2f}x     {target:6.1f}  {predicted:6.1f}"
            f"  {predicted / peak:9.3f}x    {rss:7.1f}   {above:7.1f}    "
            f"{comm if k > 1 else float('nan'):.4f}x"
        )
    results["step_time"] = {
        "fsdp_over_all": timing([{k: runs[k] for k in (1, 2)}], "FSDP2 over all ranks"),
        "replicated_over_domain": timing(
            [{1: runs[1], 2: replicated}], "parameters replicated over the domain ranks"
        ),
    }
    grid_free = double[0]["forward_bytes"] / runs[2][0]["forward_bytes"]
    results |= {
        "comm_at_double_size": grid_free,
        "disk_offload_step_ratio": offload_ratio(args.size, args.steps),
    }
    print(f"spectral bytes at twice the grid / at this grid: {grid_free:.3f} (target 1)")
    print(
        f"disk offload / checkpointing step time: {results['disk_offload_step_ratio']:.2f}x (<= 1.10x)"
    )
    (args.out / "domain_parallel.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "memory_per_rank.png")
    print(f"wrote {args.out / 'domain_parallel.json'} and memory_per_rank.png")


if __name__ == "__main__":
    main()
