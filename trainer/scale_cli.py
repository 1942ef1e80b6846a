"""``pdeladder scale``: what a run of the neural operator on a sample takes, per rank, or the
smallest tiling that fits a device (:mod:`pdeladder.trainer.distributed.scale`)."""

import json
from dataclasses import asdict
from enum import StrEnum
from typing import Annotated

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
    if as_json:
        typer.echo(json.dumps(asdict(found), indent=2))
        return
    Console().print(_table(found))


def _table(e) -> Table:
    gb = 1e9
    r = e.run
    table = Table(
        "per rank",
        "value",
        title=f"{r['ranks']} ranks = {r['dp']} dp × {r['domain']} domain on {e.nodes} node(s) of "
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
