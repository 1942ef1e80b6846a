"""The neural operator: stored reference outputs, shape checks, resolution invariance, mode
growth and activation checkpointing."""

import json
import math
from pathlib import Path

import pytest
import torch

from pdeladder.errors import UserInputError
from pdeladder.trainer.layers import SpectralConv, kept_indices
from pdeladder.trainer.models import LadderOperator, OperatorConfig

REFERENCE = Path(__file__).parent / "data" / "operator_reference.json"
CONFIG = OperatorConfig(
    in_channels=5, out_channels=2, width=6, layers=2, modes=(2, 3, 3, 1), families=2
)


def reference_case() -> tuple[LadderOperator, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = LadderOperator(CONFIG)
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


def test_initial_state_is_kept_exactly():
    model, x, family = reference_case()
    with torch.no_grad():
        y = model(x, family)
    torch.testing.assert_close(y[:, :, 0], x[:, :2, 0])


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


def test_growing_modes_keeps_the_function_and_adds_weights():
    model, x, family = reference_case()
    with torch.no_grad():
        before = model(x, family)
        for block in model.blocks:
            block.spectral.grow_modes((3, 4, 4, 1))
        after = model(x, family)
    assert model.blocks[0].spectral.weight.shape[2:6] == (5, 7, 7, 1)
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
