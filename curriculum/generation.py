"""Materializing stages: a pool of Ray solver actors fills the store with a stage's samples.

The driver plans the stages, creates their groups, reads which samples are already recorded
(status ok, or failed with a reason) and hands the rest to ``workers`` actors, two samples in
flight per actor so none waits between samples. Each actor writes its samples itself. A rerun
skips recorded samples, so a killed run loses only the samples in flight, and because a sample's
content depends only on its specification, the finished store is the same bit for bit.

Groups with ``ranks_per_sample`` K > 1 are solved as gangs beside the actors: one Ray task per
sample reserving K CPUs on one node, which runs ``mpiexec -n K`` of the slab solve
(:func:`~pdeladder.curriculum.worker.gang_solve`); each rank writes its x slab and rank 0
commits. Once no single-rank sample is left to hand out, idle actors are released so that their
CPUs go to the gangs (and started again for a later stage's single-rank samples).

Crashes: a dead actor is restarted by Ray and its in-flight samples are retried once there; a
sample whose worker still dies is resubmitted once to a fresh actor and then recorded as failed
with the reason. A gang whose rank (or task) dies leaves its sample missing and is resubmitted
once, then recorded as failed. Solver failures (divergence, NaN) are recorded by the worker.
Recorded failures are not retried unless ``retry_failed`` is set.
"""

import os
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import fsspec
import numpy as np

from pdeladder.curriculum.loader import load_curriculum
from pdeladder.curriculum.lock import StageLock
from pdeladder.curriculum.plan import GroupPlan, StagePlan, plan_stage
from pdeladder.curriculum.spec import Curriculum
from pdeladder.curriculum.weights import Weights, load_weights
from pdeladder.curriculum.worker import (
    Outcome,
    Solver,
    create_group,
    gang_task,
    group_attrs,
    solver_actor,
)
from pdeladder.dataset.format import FAILED, OK, group_metadata, identity
from pdeladder.dataset.store import Store, absolute_url, open_store
from pdeladder.errors import SolveError, StoreError, UserInputError
from pdeladder.ray_runtime import answers, ray_session, still_joined
from pdeladder.solvers.registry import get_family

#: Samples in flight per actor: one solving, one queued behind it.
IN_FLIGHT = 2
#: Longest wait for a result before the stage locks' heartbeat is renewed, seconds.
HEARTBEAT_S = 10.0
#: Times a sample is handed to a fresh actor after its worker died (beyond Ray's own retry).
RESUBMITS = 1


@dataclass(frozen=True)
class ProgressEvent:
    """What ``on_progress`` receives: ``kind="stage"`` once a stage's pending work is known,
    then ``kind="sample"`` per finished sample. Counts cover this run's pending samples."""

    kind: Literal["stage", "sample"]
    stage: str
    total: int
    done: int
    failed: int
    skipped: int
    dof_steps: int
    elapsed_s: float
    group: str = ""
    index: int = -1
    reason: str = ""
    pid: int = 0

    @property
    def dof_steps_per_s(self) -> float:
        return self.dof_steps / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass
class GroupSummary:
    """One group after a run. ``ok``/``failed``: solved in this run; ``skipped``: recorded
    before it; ``dof_steps_per_s``: DOF-steps per second of solver wall time (one worker);
    ``bytes``: uncompressed field bytes written."""

    stage: str
    group: str
    family: str
    dim: int
    resolution: int
    snapshots: int
    samples: int
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    dof_steps: int = 0
    solve_s: float = 0.0
    bytes: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def dof_steps_per_s(self) -> float:
        return self.dof_steps / self.solve_s if self.solve_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dof_steps_per_s": self.dof_steps_per_s}


@dataclass
class MaterializeSummary:
    """The result of :func:`materialize`; ``to_dict()`` is JSON-able."""

    curriculum: str
    store: str
    workers: int
    stages: list[str]
    groups: list[GroupSummary]
    elapsed_s: float = 0.0

    @property
    def ok(self) -> int:
        return sum(g.ok for g in self.groups)

    @property
    def failed(self) -> int:
        return sum(g.failed for g in self.groups)

    @property
    def skipped(self) -> int:
        return sum(g.skipped for g in self.groups)

    @property
    def dof_steps_per_s(self) -> float:
        """All workers together: DOF-steps solved per second of the run's wall time."""
        total = sum(g.dof_steps for g in self.groups)
        return total / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "curriculum": self.curriculum,
            "store": self.store,
            "workers": self.workers,
            "stages": self.stages,
            "elapsed_s": self.elapsed_s,
            "ok": self.ok,
            "failed": self.failed,
            "skipped": self.skipped,
            "dof_steps_per_s": self.dof_steps_per_s,
            "groups": [g.to_dict() for g in self.groups],
        }


def materialize(
    spec: "Curriculum | str | Path",
    stages: list[str] | None = None,
    store_url: str | None = None,
    workers: int = 2,
    address: str | None = None,
    on_progress: Callable[[ProgressEvent], None] | None = None,
    weights: "Weights | str | Path | dict | None" = None,
    *,
    retry_failed: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> MaterializeSummary:
    """Fill ``store_url`` (default: the curriculum's ``store``) with the samples of ``stages``
    (default: all, in order) on ``workers`` Ray actors; resumable and idempotent.

    ``on_progress`` receives a :class:`ProgressEvent` per stage and per finished sample;
    ``on_step`` one line for each step before the first sample (calibrating the cost model of
    a plan that picks ranks, starting Ray).

    Raises :class:`~pdeladder.errors.UserInputError` subclasses for bad input before anything
    is written, and :class:`~pdeladder.errors.StoreError` when another run holds a stage.
    """
    if not isinstance(spec, Curriculum):
        spec = load_curriculum(spec)
    if workers < 1:
        raise UserInputError(f"workers must be at least 1, got {workers}")
    url = store_url or spec.store
    if not url:
        raise UserInputError(
            f"curriculum {spec.name!r} names no store: pass --store URL (store_url=...)"
        )
    if fsspec.core.split_protocol(url)[0] == "memory":
        raise UserInputError(f"{url}: memory:// stores do not cross processes; use a path or s3://")
    url = absolute_url(url)
    names = [s.name for s in spec.stages] if stages is None else list(stages)
    w = load_weights(weights)
    plans = [plan_stage(spec, spec.stage(name), w) for name in names]  # validates before writing
    if any(g.ranks != 1 for plan in plans for g in plan.groups):
        from pdeladder.curriculum.cost import CostModel

        cost, budget = CostModel(on_measure=on_step), spec.generation.memory_budget_gb
        plans = [cost.resolve(plan, budget, cluster=address is not None) for plan in plans]
    gang = max((int(g.ranks) for plan in plans for g in plan.groups), default=1)
    try:  # refusals of what the store holds come first, before any cluster is asked
        check_store(open_store(url), plans, spec.name)
    except StoreError:  # no store yet (or one that cannot be opened: said below)
        pass
    answers(address or os.environ.get("RAY_ADDRESS", ""))  # a cluster not there: no store made
    store = open_store(url, mode="a", check_writable=True)
    growing = check_store(store, plans, spec.name)  # refusals come before Ray starts
    summary = MaterializeSummary(spec.name, url, workers, names, [])
    t0 = time.perf_counter()
    with ExitStack() as held:
        locks = [held.enter_context(StageLock(url, plan.stage)) for plan in plans]
        for g in growing:  # under the stage's lock, before any sample is handed out
            store.grow_group(g.path, g.n, {"config_hash": g.config_hash})

        def heartbeat() -> None:
            for lock in locks:
                lock.refresh()
            still_joined()  # a lost cluster is one line naming it, not a driver Ray ends

        with ray_session(address, num_cpus=max(workers, gang), on_step=on_step):
            pool = ActorPool(url, workers)
            try:
                for plan in plans:
                    summary.groups += run_stage(
                        plan, spec.name, store, pool, heartbeat, on_progress, retry_failed
                    )
            finally:
                pool.close()
    summary.elapsed_s = time.perf_counter() - t0
    return summary


#: How a refused change goes forward, in the words of the command line.
WAYS_FORWARD = (
    "materialize it under a new stage name, or into a new store (--store URL); "
    "--stage NAME materializes the other stages and leaves this one alone"
)


def check_store(store: Store, plans: list[StagePlan], curriculum: str) -> list[GroupPlan]:
    """Check the groups of ``plans`` that ``store`` holds already against the plans, before
    anything is solved; the groups to grow (their plan asks for more samples of the same
    configuration, whose first samples the design keeps: :attr:`GroupPlan.prefix_stable`).

    A group with fewer samples in the plan, or of another configuration, is a UserInputError
    in one line that names what differs and the ways forward."""
    growing = []
    for plan in plans:
        for g in plan.groups:
            try:
                node = store.root[g.path]
            except KeyError:
                continue
            attrs = dict(node.attrs)
            where = f"{store.url}: group {g.path}"
            ours = group_metadata(
                g.stage, get_family(g.family), g.grid, g.n, group_attrs(g, curriculum), "none"
            )
            old, new = identity(attrs), identity(ours)
            differ = sorted(
                k
                for k in old.keys() | new.keys()
                if k not in ("n_samples", "config_hash") and old.get(k) != new.get(k)
            )
            if differ:
                diff = "; ".join(f"{k}: {old.get(k)!r} != {new.get(k)!r}" for k in differ)
                raise UserInputError(
                    f"{where} exists with another configuration ({diff}): {WAYS_FORWARD}"
                )
            n = attrs.get("n_samples")
            if not isinstance(n, int) or attrs.get("config_hash") != g.hash_at(n):
                differ = _differing(store, g, n)
                raise UserInputError(
                    f"{where} exists with another configuration ({differ}); its samples are "
                    f"not this plan's: {WAYS_FORWARD}"
                )
            if g.n < n:
                raise UserInputError(
                    f"{where} holds {n} samples and the plan asks for {g.n}; a store never "
                    f"drops samples: keep samples at {n} or more, or {WAYS_FORWARD}"
                )
            if g.n > n and not g.prefix_stable:
                raise UserInputError(
                    f"{where}: growing from {n} to {g.n} samples would change its first "
                    f"{n}, because a {g.config['design']} design depends on the count (the "
                    f"sobol design does not): {WAYS_FORWARD}"
                )
            status = node.get("status")  # absent if a kill came before the arrays were made
            if g.n > n or (status is not None and status.shape[0] != n):
                growing.append(g)  # to grow, or to square arrays after a killed growth
    return growing


def _differing(store: Store, g: GroupPlan, n: "int | None") -> str:
    """What differs between a stored group of another ``config_hash`` and its plan ``g``,
    read from its recorded samples: the seeds (the curriculum's seed) and the parameters
    whose values differ (ranges, design, weights' regions)."""
    if n is None:
        return "an appendable group, not a curriculum's"
    group = store.group(g.path)
    status = group.status()
    m = min(len(status), g.n)
    ok = np.zeros(len(status), bool)
    ok[:m] = status[:m] == OK
    found = []
    if (group.column("seed", where=ok)[ok] != g.seeds[:m][ok[:m]]).any():
        found.append("seeds: the curriculum's seed")
    stored = group.column("params", where=ok)[ok]
    if stored.shape[1] == len(g.param_names):
        planned = g.params[:m][ok[:m]]
        moved = [p for j, p in enumerate(g.param_names) if (stored[:, j] != planned[:, j]).any()]
        if moved:
            found.append(f"parameter values of {', '.join(moved)}")
    if not found:
        found.append("seed, design, parameter ranges or weights' regions")
    return f"config_hash {group.attrs.get('config_hash')!r} != {g.hash_at(n)!r}: " + "; ".join(
        found
    )


class ActorPool:
    """``size`` solver actors; a dead one is replaced by a fresh one."""

    def __init__(self, url: str, size: int):
        self.url = url
        self.cls = solver_actor()
        self.actors: list[Any] = [None] * size  # started on first use
        self.generation = [0] * size

    def actor(self, i: int) -> Any:
        """Actor ``i``, started if it is not running."""
        if self.actors[i] is None:
            self.actors[i] = self.cls.remote(self.url)
        return self.actors[i]

    def release(self, i: int) -> None:
        """Stop actor ``i`` (its CPU goes back to Ray, for the gangs)."""
        import ray

        if self.actors[i] is not None:
            ray.kill(self.actors[i], no_restart=True)
            self.actors[i] = None
            self.generation[i] += 1

    def replace(self, i: int) -> None:
        self.release(i)
        self.actor(i)

    def close(self) -> None:
        for i in range(len(self.actors)):
            self.release(i)


def run_stage(
    plan: StagePlan,
    curriculum: str,
    store: Any,
    pool: ActorPool,
    heartbeat: Callable[[], None],
    on_progress: Callable[[ProgressEvent], None] | None,
    retry_failed: bool,
) -> list[GroupSummary]:
    """Materialize one stage with ``pool``; ``heartbeat`` renews the stage locks while it runs."""
    import ray
    from ray.exceptions import RayActorError, RayError, RayTaskError

    groups: dict[str, GroupPlan] = {g.path: g for g in plan.groups}
    local = Solver(store)  # the driver's own, to record lost samples
    summaries = {}
    queue: deque[tuple[str, int]] = deque()  # single-rank samples, for the actors
    gangs: deque[tuple[str, int]] = deque()  # K-rank samples, one Ray task each
    for g in plan.groups:
        status = create_group(store, g, curriculum).status()
        recorded = (status == OK) | ((status == FAILED) & (not retry_failed))
        grid = g.grid
        summaries[g.path] = GroupSummary(
            plan.stage, g.path, g.family, grid.dim, grid.resolution, grid.snapshots, g.n
        )
        summaries[g.path].skipped = int(recorded.sum())
        pending = [(g.path, int(i)) for i in np.flatnonzero(~recorded)]
        (queue if int(g.ranks) == 1 else gangs).extend(pending)

    total, done, failed, dof_steps = len(queue) + len(gangs), 0, 0, 0
    t0 = time.perf_counter()

    def emit(kind: Literal["stage", "sample"], **kw: Any) -> None:
        if on_progress is not None:
            skipped = sum(s.skipped for s in summaries.values())
            elapsed = time.perf_counter() - t0
            on_progress(
                ProgressEvent(
                    kind, plan.stage, total, done, failed, skipped, dof_steps, elapsed, **kw
                )
            )

    emit("stage")
    inflight: dict[Any, tuple[int, int, str, int]] = {}  # ref -> actor, generation, group, index
    resubmits: dict[tuple[str, int], int] = {}

    tasks: dict[int, Any] = {}  # ranks -> the gang task

    def submit(actor: int) -> None:
        if actor < 0:  # a gang finished: nothing to hand to an actor
            return
        while queue and sum(1 for a, *_ in inflight.values() if a == actor) < IN_FLIGHT:
            path, index = queue.popleft()
            ref = pool.actor(actor).solve.remote(path, groups[path].sample(index))
            inflight[ref] = (actor, pool.generation[actor], path, index)
        gangs_left = gangs or any(a < 0 for a, *_ in inflight.values())
        if not queue and gangs_left and not any(a == actor for a, *_ in inflight.values()):
            pool.release(actor)  # its CPU goes to the gangs

    def submit_gang(path: str, index: int) -> None:
        ranks = int(groups[path].ranks)
        if ranks not in tasks:
            tasks[ranks] = gang_task(ranks)
        ref = tasks[ranks].remote(pool.url, path, groups[path].sample(index), ranks)
        inflight[ref] = (-1, 0, path, index)

    for a in range(len(pool.actors)):
        submit(a)
    while gangs:  # Ray queues the gangs until K CPUs of one node are free
        submit_gang(*gangs.popleft())
    while inflight:
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=HEARTBEAT_S)
        heartbeat()
        for ref in ready:
            actor, generation, path, index = inflight.pop(ref)
            summary = summaries[path]
            try:
                outcome: Outcome = ray.get(ref)
            except RayActorError as err:
                if generation == pool.generation[actor]:  # not yet replaced for this death
                    pool.replace(actor)
                key = (path, index)
                if resubmits.get(key, 0) < RESUBMITS:
                    resubmits[key] = resubmits.get(key, 0) + 1
                    queue.appendleft(key)
                    submit(actor)
                    continue
                reason = f"solver process died ({type(err).__name__})"
                local.record_failure(path, groups[path].sample(index), reason)
                outcome = Outcome(path, index, False, reason, 0, 0.0, 0)
            except (RayTaskError, RayError) as err:
                cause = err.cause if isinstance(err, RayTaskError) else err
                if actor >= 0 and not isinstance(err, RayTaskError):
                    raise
                if actor < 0 and (isinstance(cause, SolveError) or cause is err):
                    # a rank or the gang's worker died: the sample is missing, try it again
                    key = (path, index)
                    if resubmits.get(key, 0) < RESUBMITS:
                        resubmits[key] = resubmits.get(key, 0) + 1
                        submit_gang(path, index)
                        continue
                reason = f"{type(cause).__name__}: {cause}"[:500]
                local.record_failure(path, groups[path].sample(index), reason)
                outcome = Outcome(path, index, False, reason, 0, 0.0, 0)
            done += 1
            summary.solve_s += outcome.wall_s
            if outcome.ok:
                summary.ok += 1
                summary.dof_steps += outcome.dof_steps
                summary.bytes += groups[path].field_bytes // groups[path].n
                dof_steps += outcome.dof_steps
            else:
                failed += 1
                summary.failed += 1
                summary.failures.append({"index": index, "reason": outcome.reason})
            emit("sample", group=path, index=index, reason=outcome.reason, pid=outcome.pid)
            submit(actor)
    return list(summaries.values())
