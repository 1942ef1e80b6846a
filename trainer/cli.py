"""``pdeladder train``, ``evaluate`` and ``predict``: thin commands over the trainer's Python API."""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from pdeladder.errors import UserInputError

#: ``--symmetrize/--no-symmetrize`` of ``evaluate`` and ``predict``.
Symmetrize = Annotated[
    bool | None,
    typer.Option(
        "--symmetrize/--no-symmetrize",
        help="Average the model over the box's reflections and axis permutations (2, 8, 48 "
        "passes in 1D, 2D, 3D; on x slabs too). Default: in 1D and 2D, where the model was "
        "trained on symmetry-augmented batches.",
        show_default=False,
    ),
]
#: ``--refine`` of ``evaluate`` and ``predict`` (checked by ``refine.check_steps``: one line).
Refine = Annotated[
    str,
    typer.Option(
        metavar="N",
        help="Improve each predicted rollout by N iterations against its family's PDE "
        "residual, the initial state, inputs and zero walls held: Gauss-Newton (sparse "
        "direct solves), or L-BFGS for a sample beyond a direct solve's size (0: off).",
    ),
]


@contextmanager
def progress_bar() -> Iterator[Progress]:
    """A progress display on stderr with the time elapsed and an estimate of the time left
    (stdout stays the command's output, ``--json`` included); a caller starts it at its first
    task, after the input checks, so that errors print one line."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    try:
        yield bar
    finally:
        if bar.live.is_started:
            bar.stop()


def scoring(bar: Progress, samples: int) -> Callable[[str, int], None]:
    """:data:`~pdeladder.trainer.evaluate.ScoringProgress` on ``bar``: one task over the
    ``samples`` to score, advanced as each group is scored."""
    bar.start()
    task = bar.add_task(f"scoring {samples} samples", total=samples)
    return lambda path, n: bar.update(task, advance=n, description=f"scored {path}")


def train(
    file: Annotated[Path, typer.Argument(help="Curriculum YAML file.")],
    stage: Annotated[
        list[str] | None, typer.Option("--stage", help="Stage to train (repeatable; default all).")
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Store URL (default: the curriculum's store).")
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            help="Workers per stage (a stage's training.workers overrides it); 1 trains in "
            "this process, more on Ray Train."
        ),
    ] = 2,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster to join (default: start a local one).")
    ] = None,
    run_dir: Annotated[Path, typer.Option(help="Where models and metrics go.")] = Path(
        "runs/train"
    ),
    gpu: Annotated[bool, typer.Option(help="One GPU per worker (NCCL, bf16).")] = False,
    activation_checkpointing: Annotated[
        bool, typer.Option(help="Recompute activations in the backward pass.")
    ] = False,
    checkpoint_every: Annotated[int, typer.Option(help="Steps between checkpoints.")] = 50,
    domain_ranks: Annotated[
        str | None,
        typer.Option(
            help="Workers that split each sample along x: a number, or auto (the fewest that "
            "fit training.memory_budget_gb); default: each stage's training.domain_ranks."
        ),
    ] = None,
    parallel: Annotated[
        str,
        typer.Option(
            help="Parameters replicated (ddp) or sharded (fsdp) over the workers; auto: sharded "
            "only for split samples or when replicas would not fit training.memory_budget_gb."
        ),
    ] = "auto",
) -> None:
    """Train the neural operator along a curriculum's stages on Ray Train (a stage of one
    worker: in this process)."""
    from pdeladder.curriculum.loader import load_curriculum
    from pdeladder.outputs import check_apart, check_writable
    from pdeladder.trainer.evaluate import evaluate_checkpoint
    from pdeladder.trainer.models.checkpoint import read_model_json
    from pdeladder.trainer.report import family_table
    from pdeladder.trainer.training.run import train_curriculum
    from pdeladder.trainer.training.timing import read_timing, timing_table

    spec = load_curriculum(file)
    if url := store or spec.store:  # a run's files never go into the store or over the file
        check_apart(run_dir, [url, file], around=False)
    check_writable(run_dir)
    result = train_curriculum(
        spec,
        stages=stage or None,
        store_url=store,
        workers=workers,
        address=address,
        run_dir=run_dir,
        use_gpu=gpu,
        activation_checkpointing=activation_checkpointing,
        checkpoint_every=checkpoint_every,
        domain_ranks=_domain_ranks(domain_ranks),
        parallel=parallel,
        on_step=partial(typer.echo, err=True),
    )
    meta = read_model_json(result.checkpoint)["metadata"]
    with progress_bar() as bar:
        report = evaluate_checkpoint(
            result.checkpoint,
            meta["store"],
            held_out=spec.held_out,
            groups=meta["paths"],
            progress=partial(scoring, bar),
        )
    console = Console()
    console.print(timing_table(read_timing(result.run_dir)))
    console.print(f"model: {result.checkpoint}\nmetrics: {result.run_dir}/metrics.jsonl")
    console.print(family_table(report))


def _domain_ranks(value: str | None) -> int | str | None:
    """``--domain-ranks``: a positive number or ``auto``, as one-line errors say."""
    if value is None or value == "auto":
        return value
    if not (value.isascii() and value.isdecimal()) or int(value) < 1:
        raise UserInputError(f"--domain-ranks must be a positive number or auto, got {value!r}")
    return int(value)


class Metrics(StrEnum):
    """``evaluate --metrics``: pdeladder's own, PDEBench's, The Well's, or all of them."""

    ours = "ours"
    pdebench = "pdebench"
    well = "well"
    all = "all"


def evaluate(
    checkpoint: Annotated[Path, typer.Argument(help="Model folder (model.json + weights).")],
    store: Annotated[str, typer.Option(help="Store URL to evaluate on.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write report.md/.json and PNGs here; an interrupted evaluation rerun into it "
            "resumes (another model's or settings' evaluation there is replaced)."
        ),
    ] = None,
    metrics: Annotated[
        Metrics,
        typer.Option(
            help="Metric convention: ours (trapezoidal space-time nRMSE), pdebench (nRMSE, "
            "cRMSE, bRMSE, fRMSE), well (VRMSE) or all; each beside its baseline."
        ),
    ] = Metrics.ours,
    domain_ranks: Annotated[
        int,
        typer.Option(
            "--domain-ranks",
            min=1,
            help="Processes that each run the model on an x slab of every sample (gloo); the "
            "predictions go to OUT/predictions.zarr.",
        ),
    ] = 1,
    symmetrize: Symmetrize = None,
    refine: Refine = "0",
    groups: Annotated[
        list[str] | None,
        typer.Option(
            "--groups",
            help="Groups to score: a path or a pattern such as 'refine/heat/*' (repeatable; "
            "default: all the model knows).",
        ),
    ] = None,
    held_out: Annotated[
        float | None,
        typer.Option(
            help="Share of each trained group's samples held out of training, in (0, 1): its "
            "curriculum's training.held_out (default: the model's record of it, else 0.1).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Score a model: nRMSE beside its trivial baseline, residuals, PNGs.

    The baseline is persistence (steady: the training mean field); also the ratio, frequency
    bands, conservation, boundary error and super-resolution."""
    from pdeladder.trainer.evaluate import evaluate_checkpoint
    from pdeladder.trainer.report import (
        convention_tables,
        family_table,
        group_table,
        refinement_rows,
        residual_table,
    )

    with progress_bar() as bar:
        report = evaluate_checkpoint(
            checkpoint,
            store,
            out,
            metrics=metrics.value,
            domain_ranks=domain_ranks,
            symmetrize=symmetrize,
            refine=refine,
            groups=groups,
            held_out=held_out,
            progress=partial(scoring, bar),
        )
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    console = Console()
    if metrics in (Metrics.ours, Metrics.all):
        console.print(group_table(report))
        console.print(residual_table(report))
    if rows := refinement_rows(report):
        table = Table(
            "group", "unrefined", "refined", "ratio", "residual before / after", "s / sample",
            title=f"Refinement at inference: {report['refine_steps']} steps against the residual",
        )  # fmt: skip
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for title, header, rows in convention_tables(report):
        table = Table(*header, title=title)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    console.print(family_table(report))


def predict(
    checkpoint: Annotated[Path, typer.Argument(help="Model folder (model.json + weights).")],
    store: Annotated[str, typer.Option(help="Store URL whose samples are the inputs.")],
    out: Annotated[str, typer.Option(help="Store URL to write the predictions into.")],
    groups: Annotated[
        list[str] | None,
        typer.Option("--groups", help="Group path (repeatable; default: all the model knows)."),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Replace a previous prediction in --out (else it is completed).")
    ] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Samples predicted at once.")] = 8,
    device: Annotated[str, typer.Option(help="Torch device: cpu, cuda, cuda:1, ...")] = "cpu",
    domain_ranks: Annotated[
        int, typer.Option(min=1, help="Processes that split each sample along x, each its slab.")
    ] = 1,
    symmetrize: Symmetrize = None,
    refine: Refine = "0",
) -> None:
    """Write a model's predicted rollouts into a store.

    The store has the format of --store (same groups, parameters, seeds and coordinates; fields
    = prediction)."""
    from pdeladder.trainer.predict import predict_store

    with progress_bar() as bar:

        def progress(path: str, samples: int) -> Callable[[int], None]:
            bar.start()  # at the first group, after the input was checked: errors print one line
            task = bar.add_task(f"predicting {path}", total=samples)
            return lambda n: bar.advance(task, n)

        written = predict_store(
            checkpoint,
            store,
            out,
            groups,
            force=force,
            batch_size=batch_size,
            device=device,
            progress=progress,
            domain_ranks=domain_ranks,
            symmetrize=symmetrize,
            refine=refine,
        )
    console = Console()
    console.print(  # whole, however long the path: a user copies it
        f"wrote {sum(written.values())} predicted samples in {len(written)} group(s) to {out}",
        soft_wrap=True,
    )
