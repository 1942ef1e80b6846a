"""The neural operator: stored reference outputs, shape checks, resolution invariance, mode
growth and activation checkpointing."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from pdeladder.errors import UserInputError
from pdeladder.trainer.layers import SpectralConv, kept_indices
from pdeladder.trainer.layers.spectral import ModeSelection, half_axis, stored_shape
from pdeladder.trainer.models import LadderOperator, OperatorConfig, load_model
from pdeladder.trainer.models.operator import GAIN_STEP

from .conftest import run_ranks

REFERENCE = Path(__file__).parent / "data" / "operator_reference.json"
IN_OUT_LAYOUT = Path(__file__).parent / "data" / "operator_in_out_layout"
CONFIG = OperatorConfig(
    in_channels=5, out_channels=2, width=6, layers=2, modes=(2, 3, 3, 1), families=2
)


def reference_case(output: str = "change") -> tuple[LadderOperator, torch.Tensor, torch.Tensor]:
    """The stored reference's model (its ``change`` output) and inputs."""
    torch.manual_seed(0)
    model = LadderOperator(dataclasses.replace(CONFIG, output=output))
    x = torch.randn(2, 5, 4, 9, 7, 1)
    return model, x, torch.tensor([0, 1])


def test_output_matches_stored_reference():
    model, x, family = reference_case()
    with torch.no_grad():
        y = model(x, family)
    ref = json.loads(REFERENCE.read_text())
    assert list(y.shape) == ref["shape"]
    torch.testing.assert_close(y[0, :, 1:3, :2, 0, 0].flatten(), torch.tensor(ref["values"]))
    assert y.square().sum().item() == pytest.approx(ref["square_sum"], rel=1e-5)


@pytest.mark.parametrize("output", ["state", "change"])
def test_initial_state_is_kept_exactly(output):
    model, x, family = reference_case(output)
    with torch.no_grad():
        y = model(x, family)
    torch.testing.assert_close(y[:, :, 0], x[:, :2, 0], rtol=0, atol=0)


def test_state_output_is_the_gain_times_u0_plus_the_network_output_after_t0():
    """Same weights: ``change`` is ``u(0) + τ N``; ``state`` after ``t = 0`` is ``N`` at its
    initial gain 0, and ``g u(0) + N`` with the gain ``g`` of each sample's family and slot."""
    model, x, family = reference_case("change")
    state = LadderOperator(CONFIG)
    state.load_state_dict({**model.state_dict(), "gain": state.gain.detach()})
    with torch.no_grad():
        change, y = model(x, family), state(x, family)
        gain = torch.tensor([[0.5, -1.0], [2.0, 0.25]])  # (families, slots)
        state.gain.copy_(gain / GAIN_STEP)
        gained = state(x, family)
    tau = torch.linspace(0, 1, x.shape[2])[1:, None, None, None]
    n = (change - x[:, :2])[:, :, 1:] / tau
    torch.testing.assert_close(y[:, :, 1:], n)
    g = gain[family][:, :, None, None, None, None]
    torch.testing.assert_close(gained[:, :, 1:], g * x[:, :2, 1:] + n)
    torch.testing.assert_close(gained[:, :, 0], x[:, :2, 0], rtol=0, atol=0)
    assert not torch.allclose(y[:, :, 1:], change[:, :, 1:])


def test_config_output_defaults_and_checks():
    assert CONFIG.output == "state"
    old = {k: v for k, v in CONFIG.to_json().items() if k != "output"}
    assert OperatorConfig.from_json(old).output == "change"  # written before the field
    assert OperatorConfig.from_json(CONFIG.to_json()) == CONFIG
    with pytest.raises(ValueError, match="output must be one of"):
        dataclasses.replace(CONFIG, output="delta")


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((2, 4, 4, 9, 7, 1), r"input must be \(batch, 5"),
        ((2, 5, 4, 9, 7), r"got \(2, 5, 4, 9, 7\)"),
    ],
)
def test_forward_rejects_bad_shapes(shape, message):
    model, _, family = reference_case()
    with pytest.raises(UserInputError, match=message):
        model(torch.zeros(shape), family)


def test_forward_rejects_unknown_family():
    model, x, _ = reference_case()
    with pytest.raises(UserInputError, match="family ids must lie in"):
        model(x, torch.tensor([0, 2]))


def test_kept_indices_match_signed_frequencies():
    assert kept_indices(8, 3, half=False) == ([0, 1, 2, 6, 7], [0, 1, 2, 3, 4])
    assert kept_indices(4, 3, half=False) == ([0, 1, 3], [0, 1, 4])  # Nyquist (2) dropped
    assert kept_indices(1, 3, half=False) == ([0], [0])
    assert kept_indices(9, 3, half=True) == ([0, 1, 2], [0, 1, 2])


def test_spectral_layer_is_resolution_invariant_on_band_limited_input():
    torch.manual_seed(1)
    layer = SpectralConv(2, 3, (2, 3, 3, 1))

    def sample(n: int) -> torch.Tensor:
        s = torch.arange(n) / n
        f = torch.sin(2 * math.pi * s)[:, None] + torch.cos(4 * math.pi * s)[None, :]
        return f.expand(1, 2, 3, n, n).unsqueeze(-1).clone()

    with torch.no_grad():
        coarse, fine = layer(sample(16)), layer(sample(32))
    torch.testing.assert_close(coarse, fine[..., ::2, ::2, :], atol=1e-5, rtol=1e-5)


def full_fft_reference(layer: SpectralConv, x: torch.Tensor) -> torch.Tensor:
    """The layer's definition computed the long way: ``rfftn`` over ``(t, x, ..)`` up to the
    weights' half axis (the axes after it have one point), the stored weights at their
    frequencies, everything else zero, ``irfftn``."""
    shape, h = x.shape[-4:], half_axis(layer.modes)
    dims = tuple(range(2, 3 + h))
    coeffs = torch.fft.rfftn(x, dim=dims, norm="forward")
    weight = torch.view_as_complex(layer.weight).unflatten(0, stored_shape(layer.modes))
    weight = weight.movedim((4, 5), (0, 1))  # (in, out, t, x, y, z)
    sel = [
        kept_indices(n, m, half=a == h)
        for a, (n, m) in enumerate(zip(shape, layer.modes, strict=True))
    ]
    for a, (fft_idx, w_idx) in enumerate(sel):
        coeffs = coeffs.index_select(2 + a, torch.tensor(fft_idx))
        weight = weight.index_select(2 + a, torch.tensor(w_idx))
    mixed = torch.einsum("bitxyz,iotxyz->botxyz", coeffs, weight)
    spectrum = [n // 2 + 1 if a == h else n for a, n in enumerate(shape)]
    full = torch.zeros(x.shape[0], layer.out_channels, *spectrum).to(mixed)
    grids = torch.meshgrid(*[torch.tensor(f) for f, _ in sel], indexing="ij")
    full[(slice(None), slice(None), *grids)] = mixed
    return torch.fft.irfftn(full, s=tuple(shape[: h + 1]), dim=dims, norm="forward")


@pytest.mark.parametrize(
    ("shape", "modes"),
    [
        ((5, 9, 1, 1), (2, 3, 3, 1)),  # 1D: the half transform runs along x
        ((4, 10, 7, 1), (3, 8, 3, 1)),  # 2D, more modes than an axis resolves
        ((3, 6, 5, 1), (2, 3, 4, 1)),  # 2D, more modes than the half axis resolves
        ((1, 8, 6, 5), (1, 2, 3, 3)),  # 3D steady: the stored half axis z
        ((6, 1, 1, 1), (3, 3, 3, 1)),  # time only
        ((4, 7, 1, 1), (2, 3, 1, 1)),  # a 1D model: the weights' half axis x
        ((4, 7, 5, 1), (2, 3, 3, 3)),  # a 2D grid in a 3D model: the grid's half axis y
    ],
)
def test_pruned_transform_computes_the_full_fft_definition(shape, modes):
    torch.manual_seed(2)
    layer = SpectralConv(3, 2, modes)
    x = torch.randn(2, 3, *shape, dtype=torch.float32, requires_grad=True)
    y, ref = layer(x), full_fft_reference(layer, x)
    torch.testing.assert_close(y, ref, atol=1e-6, rtol=1e-5)
    g = torch.autograd.grad(y.square().sum(), (x, layer.weight))
    g_ref = torch.autograd.grad(ref.square().sum(), (x, layer.weight))
    torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-4)


def test_a_grid_past_the_weights_last_axis_is_refused():
    layer = SpectralConv(2, 2, (2, 3, 3, 1))  # a 2D model's weights: y is their half axis
    with pytest.raises(ValueError, match="has points past the last axis"):
        layer(torch.randn(1, 2, 3, 6, 5, 4))


def test_weights_stored_in_out_first_load_as_the_same_function():
    """A checkpoint written before the mode-major layout (a 2D model, width 6), with the
    outputs that the layer of that layout computed, on a 2D and a 1D input."""
    model, _ = load_model(IN_OUT_LAYOUT)
    assert model.blocks[0].spectral.weight.shape == (3 * 5 * 3, 6, 6, 2)  # y: non-negative
    expected = json.loads((IN_OUT_LAYOUT / "expected.json").read_text())
    g = torch.Generator().manual_seed(5)
    for case in ("2d", "1d"):
        x = torch.randn(*expected[case]["shape"], generator=g)
        with torch.no_grad():
            y = model(x, torch.tensor([0, 1]))
        torch.testing.assert_close(
            y.flatten(), torch.tensor(expected[case]["output"]), atol=1e-6, rtol=1e-5
        )


def test_bias_is_added_at_every_point():
    torch.manual_seed(3)
    layer, bias = SpectralConv(3, 2, (2, 3, 3, 1)), torch.randn(2)
    x = torch.randn(2, 3, 4, 9, 7, 1)
    with torch.no_grad():
        expected = layer(x) + bias[:, None, None, None, None]
        torch.testing.assert_close(layer(x, bias=bias), expected, atol=1e-6, rtol=1e-5)


def test_half_axis_is_the_last_axis_with_points():
    assert ModeSelection.of((5, 9, 1, 1), (2, 3, 3, 1)).half == 1
    assert ModeSelection.of((5, 9, 7, 1), (2, 3, 3, 1)).half == 2
    assert ModeSelection.of((5, 9, 7, 4), (2, 3, 3, 2)).half == 3
    sel = ModeSelection.of((5, 10, 8, 1), (2, 8, 3, 1))
    assert sel.kept == ((2, 1), (5, 4), (3, 0), (1, 0)) and sel.block_shape == (3, 9, 3, 1)


def test_growing_modes_keeps_the_function_and_adds_weights():
    model, x, family = reference_case()
    with torch.no_grad():
        before = model(x, family)
        for block in model.blocks:
            block.spectral.grow_modes((3, 4, 4, 1))
        after = model(x, family)
    assert model.blocks[0].spectral.weight.shape[0] == 5 * 7 * 4  # y: the half axis
    torch.testing.assert_close(before, after, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="only grow"):
        model.blocks[0].spectral.grow_modes((1, 4, 4, 1))


def test_activation_checkpointing_gives_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        model, x, family = reference_case()
        model.checkpointing = checkpointing
        model(x, family).square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


SHARDED_RANK = """
import sys, torch, torch.distributed as dist
from pdeladder.trainer.models import LadderOperator, OperatorConfig
from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
rank, world_size, init, out, config = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
torch.manual_seed(0)  # as reference_case()
model = LadderOperator(OperatorConfig.from_json(__import__("json").loads(config)))
x, family = torch.randn(2, 5, 4, 9, 7, 1), torch.tensor([0, 1])
model.checkpointing = True
model = parallelize(model, ParallelDims(dp=2), None, torch.device("cpu"))
model(x, family).square().mean().backward()
grads = torch.cat([p.grad.full_tensor().flatten() for p in model.parameters()])
if rank == 0:
    torch.save(grads, out)
dist.destroy_process_group()
"""


def test_sharded_checkpointed_model_gives_the_unsharded_gradients(tmp_path):
    """FSDP2 over two real processes (gloo) with activation checkpointing (the lift and the
    projection are recomputed in the backward pass, with the root's parameters) against one
    plain process."""
    out = run_ranks(["-c", SHARDED_RANK], 2, tmp_path, json.dumps(CONFIG.to_json()))
    model, x, family = reference_case(CONFIG.output)
    model(x, family).square().mean().backward()
    plain = torch.cat([p.grad.flatten() for p in model.parameters()])
    torch.testing.assert_close(torch.load(out, weights_only=True), plain)


REPLICATED_RANK = """
import json, sys, torch, torch.distributed as dist
from pdeladder.trainer.models import LadderOperator, OperatorConfig
from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
from pdeladder.slabs import DomainTiling
from pdeladder.trainer.training.loop import adamw, save_training_state
rank, world_size, init, out, config = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
torch.manual_seed(0)  # as reference_case()
operator = LadderOperator(OperatorConfig.from_json(json.loads(config)))
x, family = torch.randn(2, 5, 4, 9, 7, 1), torch.tensor([0, 1])
model = parallelize(operator, ParallelDims.of(2, DomainTiling(), "none"), None, torch.device("cpu"))
optimizer = adamw(model.parameters(), 1e-2)
model(x[rank : rank + 1], family[rank : rank + 1]).square().mean().backward()  # its half
grads = torch.cat([p.grad.flatten() for p in operator.parameters()])
optimizer.step()
state = {"stage": "s", "step": 1, "model": json.loads(config), "layout": {}, "paths": []}
save_training_state(out, model, optimizer, state)
torch.save(grads, f"{out}/grads-{rank}.pt")
dist.destroy_process_group()
"""


def test_replicated_model_gives_the_unsharded_step_and_checkpoint(tmp_path):
    """Plain data parallel (DDP, ``shard="none"``) over two real processes, one sample each:
    both ranks' gradients equal one process's over the two samples, and the checkpoint they
    write exports the weights of that process's fused AdamW step."""
    from pdeladder.trainer.training.loop import adamw
    from pdeladder.trainer.training.run import export_model

    out = run_ranks(["-c", REPLICATED_RANK], 2, tmp_path, json.dumps(CONFIG.to_json()))
    model, x, family = reference_case(CONFIG.output)
    optimizer = adamw(model.parameters(), 1e-2)
    model(x, family).square().mean().backward()
    plain = torch.cat([p.grad.flatten() for p in model.parameters()])
    for rank in (0, 1):
        torch.testing.assert_close(torch.load(out / f"grads-{rank}.pt", weights_only=True), plain)
    optimizer.step()
    exported, _ = load_model(export_model(str(out), tmp_path / "model", {}))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(exported.state_dict()[name], value)


def test_parameters_are_sharded_only_when_needed():
    """auto: replicated (over a sample's domain ranks, for split samples) without a budget or
    when the replicas fit it; sharded over all ranks when only shards fit; ddp with split
    samples is a one-line error."""
    from pdeladder.slabs import DomainTiling
    from pdeladder.trainer.distributed.choose import StageSizing, mixing_for, shard_for
    from pdeladder.trainer.distributed.memory import peak_bytes

    config = OperatorConfig(5, 2, width=16, layers=4, modes=(4, 8, 8, 1))
    grid = (11, 33, 33, 1)
    replicated, sharded = (
        peak_bytes(config, grid, 2, 8, DomainTiling(padding=0.25), 2, False, fsdp=fsdp) / 2**30
        for fsdp in (False, True)
    )
    assert sharded < replicated

    def sizing(budget_gb: float | None) -> StageSizing:
        return StageSizing(2, [grid], config, 2, 8, False, budget_gb)

    assert shard_for("auto", 1, sizing(None)) == "none"
    assert shard_for("auto", 1, sizing(replicated * 1.01)) == "none"
    assert shard_for("auto", 1, sizing((replicated + sharded) / 2)) == "all"
    assert shard_for("auto", 2, sizing(None)) == "dp"
    assert mixing_for(2, sizing(None)) == "whole"
    split = {  # two domain ranks: parameters whole on both, or sharded over them
        shard: sizing(None).peak_gb(2, shard=shard, mixing="whole") for shard in ("dp", "all")
    }
    assert split["all"] < split["dp"]
    assert shard_for("auto", 2, sizing(split["dp"] * 1.01)) == "dp"
    assert shard_for("auto", 2, sizing((split["dp"] + split["all"]) / 2)) == "all"
    assert shard_for("fsdp", 1, sizing(None)) == "all"
    assert shard_for("fsdp", 2, sizing(None)) == "all"
    with pytest.raises(UserInputError, match="parallel ddp needs one rank per sample, not 2"):
        shard_for("ddp", 2, sizing(None))
    with pytest.raises(UserInputError, match="parallel must be auto, ddp or fsdp"):
        shard_for("zero", 1, sizing(None))


def test_large_samples_mix_the_whole_kept_block_small_ones_their_share():
    """auto: every domain rank mixes the whole kept block where that adds little to its work
    (a slab's transforms dwarf a small block's mixing), each its share where the mixing would
    dominate (a wide model on a small grid split four ways), or where only shares fit the
    budget."""
    from pdeladder.trainer.distributed.choose import StageSizing, mixing_for

    def sizing(width, grid, modes, ranks, budget_gb=None):
        config = OperatorConfig(5, 2, width=width, layers=4, modes=modes)
        return StageSizing(ranks, [grid], config, 2, 1, False, budget_gb)

    assert mixing_for(2, sizing(16, (11, 128, 128, 1), (4, 8, 8, 1), 2)) == "whole"
    assert mixing_for(8, sizing(128, (16, 256, 256, 256), (4, 16, 16, 16), 8)) == "whole"
    assert mixing_for(4, sizing(64, (5, 16, 16, 1), (3, 8, 8, 1), 4)) == "share"
    assert mixing_for(1, sizing(64, (5, 16, 16, 1), (3, 8, 8, 1), 1)) == "whole"
    big = sizing(16, (11, 128, 128, 1), (4, 8, 8, 1), 2)
    whole, share = (big.peak_gb(2, mixing=m) for m in ("whole", "share"))
    assert share < whole
    assert mixing_for(2, sizing(16, (11, 128, 128, 1), (4, 8, 8, 1), 2, whole)) == "whole"
    tight = (whole + share) / 2
    assert mixing_for(2, sizing(16, (11, 128, 128, 1), (4, 8, 8, 1), 2, tight)) == "share"


if (
    __name__ == "__main__"
):  # regenerate the stored reference (only when the model changes on purpose)
    m, xx, fam = reference_case()
    with torch.no_grad():
        out = m(xx, fam)
    REFERENCE.parent.mkdir(exist_ok=True)
    REFERENCE.write_text(
        json.dumps(
            {
                "shape": list(out.shape),
                "values": out[0, :, 1:3, :2, 0, 0].flatten().tolist(),
                "square_sum": out.square().sum().item(),
            },
            indent=1,
        )
    )
