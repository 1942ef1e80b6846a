"""The scale model (trainer/distributed/memory.py, scale.py) against the real model.

- Activations: the bytes autograd saves in a training forward pass (every distinct storage the
  saved-tensor hooks see, parameters and the model input excluded) equal :func:`saved_bytes`
  exactly, on whole samples and on each rank's slab of a 2-rank tiling, with and without
  checkpointing and disk offload; so do the tensors one stage's recomputation saves.
- Communication: the bytes :attr:`DomainGroup.sent` counts in one training step (the spectral
  all-reduce forward, backward and recomputed, the loss's sums, the H1 loss's halos) on 1 and
  2 gloo processes, every rank mixing the whole kept block or each its share, equal
  :func:`domain_sent` exactly.
- Peak memory: the tensor peak of a training step as the trainer takes it, measured on 1, 2
  and 4 gloo processes (2D and 3D samples, with and without checkpointing), is within 15 % of
  :func:`peak_bytes`.
- ``pdeladder scale``: a tiling, the fit search, and one-line errors with exit 2.
"""

import json
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.errors import exit_on_error
from pdeladder.slabs import DomainTiling, Slab, padding
from pdeladder.trainer.distributed.memory import peak_bytes, saved_bytes
from pdeladder.trainer.distributed.scale import PRESETS, Run, domain_sent, estimate
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig
from pdeladder.trainer.scale_cli import memory_figure

from .conftest import run_ranks

RANK = Path(__file__).with_name("scale_rank.py")
sys.path.insert(0, str(RANK.parent))
from scale_rank import CASES, MEMORY  # noqa: E402
from scale_rank import config as rank_config  # noqa: E402

#: (grid (T, X, Y, Z), modes, width, batch); the last is large enough for offload to move it
GRIDS = [
    ((6, 9, 7, 1), (2, 3, 3, 1), 6, 2),
    ((5, 17, 1, 1), (2, 4, 1, 1), 6, 1),
    ((4, 8, 6, 5), (2, 3, 2, 2), 6, 2),
    ((4, 16, 12, 1), (2, 4, 4, 1), 16, 2),
]


class SavedStorages:
    """Bytes of the distinct storages autograd saves within the context, less ``excluded``."""

    def __init__(self, excluded: list[torch.Tensor]):
        self.excluded = {t.untyped_storage().data_ptr() for t in excluded}
        self.seen: dict[int, int] = {}

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.excluded:
            self.seen[storage.data_ptr()] = storage.nbytes()
        return t

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)

    @property
    def bytes(self) -> int:
        return sum(self.seen.values())

    @classmethod
    def around(cls, call, excluded: list[torch.Tensor]) -> int:
        """The bytes ``call()`` saves, less ``excluded``."""
        with cls(excluded) as saved:
            call()
        return saved.bytes


def slabs(grid, k):
    tiling = DomainTiling(x=k, padding=0.25)
    return [tiling.slab(grid, i) for i in range(k)] if k > 1 else [Slab.whole(grid)]


@pytest.mark.parametrize(("grid", "modes", "width", "batch"), GRIDS)
@pytest.mark.parametrize("k", [1, 2])
def test_saved_activations_are_counted_exactly(grid, modes, width, batch, k):
    torch.manual_seed(0)
    cfg = OperatorConfig(3, 2, width=width, layers=3, modes=modes, families=2)
    model = LadderOperator(cfg)
    family = torch.arange(batch) % 2
    for slab in slabs(grid, k):
        x = torch.randn(batch, 3, *slab.local_shape)
        for checkpointing, offload in ((False, "none"), (True, "none"), (True, "disk")):
            model.checkpointing, model.offload = checkpointing, offload
            predicted = saved_bytes(cfg, slab, batch, checkpointing, offload)
            if offload == "disk" and not predicted.offloaded:
                continue  # under the offload's size threshold: the hooks could not see it stay
            with SavedStorages([x, *model.parameters()]) as saved:
                model(x, family, slab)
            assert saved.bytes == predicted.kept, (slab, checkpointing, offload)
        # the recomputation of each stage saves what the same stage saves unchecked
        model.checkpointing = False
        padded = slab.padded(padding(slab.shape, cfg.padding))
        coords = torch.zeros(batch, 4, *slab.local_shape)
        h = torch.zeros(batch, width, *padded.local_shape, requires_grad=True)  # as in training
        weights = list(model.parameters())  # a stage's inputs are kept by checkpointing
        stages = [
            SavedStorages.around(
                partial(model.lifted, x, coords, family, padded), [x, coords, *weights]
            ),
            SavedStorages.around(partial(model.blocks[0], h, padded), [h, *weights]),
            SavedStorages.around(partial(model.projected, h, slab.local_shape), [h, *weights]),
        ]
        assert max(stages) == saved_bytes(cfg, slab, batch, True).recompute


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """``measured(world_size)``: each rank's ``scale_rank.py`` results on ``world_size`` gloo processes
    (run once per world size)."""
    runs = {}

    def get(world_size: int) -> list[dict]:
        if world_size not in runs:
            out = run_ranks([str(RANK)], world_size, tmp_path_factory.mktemp(f"ranks{world_size}"))
            runs[world_size] = [
                json.loads(Path(f"{out}.{i}").read_text()) for i in range(world_size)
            ]
        return runs[world_size]

    return get


@pytest.mark.parametrize("mixing", ["whole", "share"])
@pytest.mark.parametrize("world_size", [1, 2])
def test_domain_bytes_equal_the_counted_ones(measured, world_size, mixing):
    for index, results in enumerate(measured(world_size)):
        for name, sample, modes, batch, checkpointing, loss in CASES:
            run = Run(
                rank_config(modes),
                sample,
                batch=batch,
                ranks=world_size,
                domain=world_size,
                checkpointing=checkpointing,
                loss=loss,
                mixing=mixing,
            )
            predicted = domain_sent(run, index)
            got = {kind: results["sent"][mixing][name].get(kind, 0) for kind in predicted}
            assert got == predicted, (name, index)
            if world_size > 1:
                assert predicted["all_reduce"] > 0 and (predicted["halo"] > 0) == (loss == "h1")


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_peak_memory_is_predicted_within_15_percent(measured, world_size):
    ranks = measured(world_size)
    for name, (t, c, x, y, z), modes, width, batch, checkpointing in MEMORY:
        tiling = DomainTiling(x=world_size, padding=0.25)
        cfg = rank_config(modes, width)
        predicted = peak_bytes(cfg, (t, x, y, z), c, batch, tiling, world_size, checkpointing)
        peak = max(results["memory"][name] for results in ranks)  # the largest rank's
        assert abs(predicted / peak - 1) <= 0.15, (name, predicted / 2**20, peak / 2**20)
    # the measurement sees the activations: checkpointing lowers it
    peaks = {name: max(r["memory"][name] for r in ranks) for name, *_ in MEMORY}
    assert peaks["2d checkpointed"] < 0.8 * peaks["2d"]


def test_estimate_parts_and_fit():
    cfg = OperatorConfig(5, 4, width=32, layers=4, modes=(8, 8, 8, 8), padding=0.0)
    run = Run(cfg, (64, 4, 512, 512, 64), ranks=16, domain=8, checkpointing=True)
    e = estimate(run, PRESETS["h100"])
    assert e.nodes == 2 and e.run["dp"] == 2
    assert e.memory["peak"] == sum(v for k, v in e.memory.items() if k not in ("peak", "offloaded"))
    # domain group within a node: the all-reduce at NVLink speed; FSDP over 2 nodes at the NIC's
    assert e.seconds["step_lower_bound"] == max(e.seconds["compute"], e.seconds["communication"])
    result = CliRunner().invoke(
        app, ["scale", "64,4,512,512,64", "--padding", "0", "--checkpointing", "--fit", "--json"]
    )
    assert result.exit_code == 0, result.output
    fit = json.loads(result.output)
    k = fit["run"]["domain"]
    assert fit["fits"] and k > 1
    fewer = Run(cfg, (64, 4, 512, 512, 64), ranks=k - 1, domain=k - 1, checkpointing=True)
    assert not estimate(fewer, PRESETS["h100"]).fits


def test_a_run_mixes_as_training_would():
    """``mixing: auto`` takes training's rule: a large sample's ranks mix the whole kept block,
    a wide model's on a small grid split four ways each its share, at twice the collectives."""
    large = Run(OperatorConfig(5, 4, width=32, layers=4, modes=(8, 8, 8, 8)), (64, 4, 512, 512, 64))
    large = replace(large, ranks=8, domain=8)
    small = Run(OperatorConfig(5, 2, width=64, layers=4, modes=(3, 8, 8, 1)), (5, 4, 16, 16, 1))
    small = replace(small, ranks=4, domain=4)
    assert estimate(large, PRESETS["h100"]).run["mixing"] == "whole"
    shared = estimate(small, PRESETS["h100"])
    assert shared.run["mixing"] == "share"
    whole = estimate(replace(small, mixing="whole"), PRESETS["h100"])
    assert shared.flops["mixing"] * 4 == whole.flops["mixing"]
    assert shared.sent["all_reduce"] >= whole.sent["all_reduce"]  # padded to 4 shares


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["10,4,9,8,8", "--ranks", "3", "--domain-ranks", "2"], "do not split"),
        (["10,4,9,8,8", "--device", "tpu"], "unknown device"),
        (["10,4,0,8,8"], "5 positive integers"),
        (["10,4,9,8"], "5 positive integers"),
        (["10,4,7,8,8", "--domain-ranks", "4", "--ranks", "4"], "at least 2"),
        (["10,4,9,8,8", "--offload", "disk"], "add checkpointing"),
        (["10,4,9,8,8", "--memory-gb", "0"], "must be positive"),
        (["10,4,9,8,8", "--plot", "no/such/folder/m.png"], "no folder 'no/such/folder'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exited:
        exit_on_error(lambda: app(["scale", *args]))
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert message in err and err.count("\n") == 1, err


def test_plot_draws_memory_per_rank_against_ranks(tmp_path: Path):
    """`scale --plot`: the peak per rank at 2, 4, 6 (asked), 8, ... ranks (2 data-parallel
    groups), each the estimate's and falling as the domain ranks grow, its parts stacked up to
    it, the device's memory and the asked ranks marked."""
    png = tmp_path / "memory.png"
    args = ["scale", "10,4,64,64,64", "--ranks", "6", "--domain-ranks", "3", "--checkpointing"]
    result = CliRunner().invoke(app, [*args, "--plot", str(png), "--json"])
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 0 and json.loads(result.stdout)["run"]["ranks"] == 6
    cfg = OperatorConfig(5, 4, width=32, layers=4, modes=(8, 8, 8, 8))
    run = Run(cfg, (10, 4, 64, 64, 64), ranks=6, domain=3, checkpointing=True)
    ax = memory_figure(run, PRESETS["h100"]).axes[0]
    lines = {line.get_label(): line for line in ax.lines}
    peak = lines["peak"]
    ranks = [int(r) for r in peak.get_xdata()]
    assert ranks[:5] == [2, 4, 6, 8, 16] and ranks[-1] == 64  # x halves to 2 points a rank
    want = [
        estimate(Run(cfg, run.sample, ranks=r, domain=r // 2, checkpointing=True), PRESETS["h100"])
        for r in ranks
    ]
    assert list(peak.get_ydata()) == pytest.approx([e.memory["peak"] / 1e9 for e in want])
    assert (np.diff(peak.get_ydata()) < 0).all()
    stacked = ax.collections[-1].get_paths()[0].vertices[:, 1].max()  # the top part's top
    assert stacked == pytest.approx(peak.get_ydata().max())
    assert list(lines["H100 SXM 80 GB: 80 GB"].get_ydata()) == [80, 80]
    assert list(lines["asked: 6 ranks"].get_xdata()) == [6, 6]
    assert ax.get_ylabel() == "memory per rank [GB]" and "ranks" in ax.get_xlabel()
