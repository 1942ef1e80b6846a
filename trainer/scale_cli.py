"""``pdeladder scale``: what a run of the neural operator on a sample takes, per rank, or the
smallest tiling that fits a device (:mod:`pdeladder.trainer.distributed.scale`)."""

import json
from dataclasses import asdict, replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from pdeladder.errors import UserInputError


class Precision(StrEnum):
    fp32 = "fp32"
    bf16 = "bf16"


class Offload(StrEnum):
    none = "none"
    host = "host"
    disk = "disk"


class Loss(StrEnum):
    none = "none"
    l2 = "l2"
    h1 = "h1"


#: The largest axis (points or modes), hidden width and depth ``scale`` models: beyond any
#: run, and the bound that keeps an estimate (and the ``--fit`` search) quick.
MAX_AXIS, MAX_WIDTH, MAX_LAYERS = 1 << 20, 1 << 16, 1000


def _ints(text: str, count: int, what: str) -> tuple[int, ...]:
    """``"a,b,c"`` → ``count`` positive integers up to :data:`MAX_AXIS`, or a one-line error
    naming ``what`` (ASCII digits only: ``str.isdigit`` accepts ``²``, which ``int`` refuses)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != count or not all(
        p.isascii() and p.isdecimal() and 0 < int(p) <= MAX_AXIS for p in parts
    ):
        raise UserInputError(
            f"{what} must be {count} positive integers a,b,.. of at most {MAX_AXIS}, got {text!r}"
        )
    return tuple(int(p) for p in parts)


def scale(
    sample: Annotated[
        str, typer.Argument(help="Sample shape T,C,X,Y,Z (time steps, stored channels, grid).")
    ],
    width: Annotated[int, typer.Option(help="Hidden channels.")] = 32,
    layers: Annotated[int, typer.Option(help="Fourier blocks.")] = 4,
    modes: Annotated[str, typer.Option(help="Kept modes per axis t,x,y,z.")] = "8,8,8,8",
    in_channels: Annotated[int, typer.Option(help="Model input channels.")] = 0,
    out_channels: Annotated[int, typer.Option(help="Predicted channels (default: C).")] = 0,
    padding: Annotated[float, typer.Option(help="Zero padding fraction per axis.")] = 0.25,
    batch: Annotated[int, typer.Option(help="Samples per data-parallel group.")] = 1,
    ranks: Annotated[int, typer.Option(help="Ranks in all (data-parallel × domain).")] = 1,
    domain_ranks: Annotated[int, typer.Option(help="Ranks that split each sample along x.")] = 1,
    precision: Annotated[
        Precision, typer.Option(help="Compute dtype of parameters and activations.")
    ] = Precision.fp32,
    fsdp: Annotated[bool, typer.Option(help="Shard parameters over all ranks (FSDP2).")] = True,
    checkpointing: Annotated[
        bool, typer.Option(help="Activation checkpointing (keep only each stage's input).")
    ] = False,
    offload: Annotated[
        Offload, typer.Option(help="Where checkpointed block inputs go.")
    ] = Offload.none,
    loss: Annotated[Loss, typer.Option(help="Data loss (h1 adds x halos).")] = Loss.l2,
    inference: Annotated[
        bool, typer.Option(help="Forward only: no gradients, optimizer or saved activations.")
    ] = False,
    device: Annotated[
        str,
        typer.Option(
            help="Accelerator preset: h100, h200, a100, mi300x (datasheets) or cpu (measured)."
        ),
    ] = "h100",
    memory_gb: Annotated[float | None, typer.Option(help="Custom device memory, GB.")] = None,
    tflops: Annotated[float | None, typer.Option(help="Custom peak TFLOP/s.")] = None,
    intra_gbs: Annotated[float | None, typer.Option(help="Custom intra-node GB/s.")] = None,
    inter_gbs: Annotated[float | None, typer.Option(help="Custom inter-node GB/s.")] = None,
    per_node: Annotated[int | None, typer.Option(help="Custom devices per node.")] = None,
    fit: Annotated[
        bool,
        typer.Option(
            help="Find the fewest domain ranks (--ranks / --domain-ranks groups) that fit."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the estimate as JSON.")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="Draw the memory per rank, part by part, against the ranks into this PNG: the "
            "domain ranks doubled from 1 (and those asked), the data-parallel groups as asked.",
        ),
    ] = None,
) -> None:
    """Per rank: parameters, gradients, optimizer state, activations, transform and halo
    buffers; per step: FLOPs, bytes per collective and a step-time lower bound."""
    from pdeladder.trainer.distributed import scale as model
    from pdeladder.trainer.models.operator import OperatorConfig

    shape = _ints(sample, 5, "the sample shape T,C,X,Y,Z")
    channels = shape[1]
    bounds = (("width", width, MAX_WIDTH), ("layers", layers, MAX_LAYERS), ("batch", batch, None))
    for name, value, most in (
        *bounds,
        ("ranks", ranks, None),
        ("domain-ranks", domain_ranks, None),
    ):
        if value < 1 or (most is not None and value > most):
            within = f"between 1 and {most}" if most else "positive"
            raise UserInputError(f"--{name} must be {within}, got {value}")
    for name, value in (("in-channels", in_channels), ("out-channels", out_channels)):
        if not 0 <= value <= MAX_WIDTH:
            raise UserInputError(f"--{name} must lie in [0, {MAX_WIDTH}] (0: from C), got {value}")
    if not 0 <= padding < 1:
        raise UserInputError(f"--padding must lie in [0, 1), got {padding:g}")
    config = OperatorConfig(
        in_channels=in_channels or channels + 1,
        out_channels=out_channels or channels,
        width=width,
        layers=layers,
        modes=_ints(modes, 4, "--modes"),
        padding=padding,
    )
    dev = model.device(
        device,
        memory_gb=memory_gb,
        tflops=tflops,
        intra_gbs=intra_gbs,
        inter_gbs=inter_gbs,
        per_node=per_node,
    )
    if ranks % domain_ranks:
        raise UserInputError(f"{ranks} ranks do not split into domain groups of {domain_ranks}")
    if plot is not None and not plot.parent.is_dir():
        raise UserInputError(f"--plot {plot}: no folder {str(plot.parent)!r}")
    run = model.Run(
        config,
        shape,
        batch=batch,
        ranks=ranks,
        domain=domain_ranks,
        precision=precision.value,
        fsdp=fsdp,
        checkpointing=checkpointing,
        offload=offload.value,
        loss=loss.value,
        training=not inference,
    )
    found = (
        model.smallest_tiling(run, dev, ranks // domain_ranks) if fit else model.estimate(run, dev)
    )
    if plot is not None:
        memory_figure(
            replace(run, ranks=found.run["ranks"], domain=found.run["domain"]), dev
        ).savefig(plot, dpi=100)
    if as_json:
        typer.echo(json.dumps(asdict(found), indent=2))
        return
    Console().print(_table(found))
    if plot is not None:
        Console().print(f"memory per rank against ranks: {plot}")


def memory_figure(run: Any, dev: Any) -> Any:
    """The predicted memory per rank of ``run`` (a scale ``Run``) on ``dev`` (a ``Device``), its
    parts on the device stacked up to the peak, against the ranks in all: ``run``'s data-parallel
    groups, each of 1, 2, 4, ... domain ranks (while a rank holds enough x points) and of
    ``run``'s own, which is marked; the device's memory is a horizontal line."""
    from matplotlib.figure import Figure

    from pdeladder.trainer.distributed import scale as model

    dp, ks, k = run.dp, {run.domain}, 1
    while k <= model.MAX_FIT_DOMAIN:
        try:
            replace(run, ranks=dp * k, domain=k)
        except UserInputError:
            break  # a rank would hold too few x points
        ks.add(k)
        k *= 2
    ks = sorted(ks)
    found = [model.estimate(replace(run, ranks=dp * k, domain=k), dev) for k in ks]
    parts = [  # those on the device that any of the tilings holds
        p
        for p in found[0].memory
        if p not in ("peak", "offloaded") and any(e.memory[p] for e in found)
    ]
    gb = 1e9
    ranks = [dp * k for k in ks]
    fig = Figure(figsize=(8.5, 4.8), layout="constrained")
    ax = fig.subplots()
    ax.stackplot(ranks, [[e.memory[p] / gb for e in found] for p in parts], labels=parts)
    ax.plot(ranks, [e.memory["peak"] / gb for e in found], "k.-", label="peak")
    ax.axhline(dev.memory / gb, color="C3", ls="--", label=f"{dev.name}: {dev.memory / gb:g} GB")
    ax.axvline(run.ranks, color="0.3", ls=":", label=f"asked: {run.ranks} ranks")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks, [str(r) for r in ranks])
    ax.set_xlabel(f"ranks ({dp} data-parallel group(s) × domain ranks)")
    ax.set_ylabel("memory per rank [GB]")
    t, c, x, y, z = run.sample
    what = "training step" if run.training else "inference"
    ax.set_title(
        f"{what} on a T,C,X,Y,Z = {t},{c},{x},{y},{z} sample, batch {run.batch}, {run.precision}",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside: hides nothing
    return fig


def _table(e) -> Table:
    gb = 1e9
    r = e.run
    table = Table(
        "per rank",
        "value",
        title=f"{r['ranks']} ranks = {r['dp']} dp × {r['domain']} domain ({r['mixing']} mixing) "
        f"on {e.nodes} node(s) of "
        f"{e.device['name']} ({e.device['memory'] / gb:g} GB): "
        + ("fits" if e.fits else "[red]does not fit"),
    )
    for key, value in e.memory.items():
        table.add_row(f"memory: {key}", f"{value / gb:.4g} GB")
    for key, value in e.flops.items():
        table.add_row(f"FLOPs per step: {key}", f"{value:.4g}")
    for key, value in e.sent.items():
        table.add_row(f"handed to {key} per step", f"{value / gb:.4g} GB")
    for key, value in e.wire.items():
        table.add_row(f"on the wire: {key}", f"{value / gb:.4g} GB")
    for key, value in e.seconds.items():
        table.add_row(key.replace("_", " "), f"{value:.4g}" + ("" if "share" in key else " s"))
    return table
