"""Pickle-free model checkpoints: JSON arguments beside safetensors weights."""

import json

import pytest
import torch

from pdeladder.dataset.slots import Normaliser, SlotLayout
from pdeladder.errors import UserInputError
from pdeladder.trainer.models import LadderOperator, OperatorConfig, load_model, save_model


def test_round_trip_rebuilds_the_model_without_its_class(tmp_path):
    torch.manual_seed(0)
    model = LadderOperator(
        OperatorConfig(in_channels=4, out_channels=1, width=5, layers=2, modes=(2, 2, 1, 1))
    )
    save_model(model, tmp_path / "ckpt", {"stage": "s1", "step": 3})
    doc = json.loads((tmp_path / "ckpt" / "model.json").read_text())
    assert doc["model"] == "ladder_operator" and doc["args"]["modes"] == [2, 2, 1, 1]
    loaded, meta = load_model(tmp_path / "ckpt")
    assert meta == {"stage": "s1", "step": 3}
    x, fam = torch.randn(2, 4, 3, 8, 1, 1), torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x, fam), model(x, fam), rtol=0, atol=0)


def test_a_folder_without_a_model_is_a_clear_error(tmp_path):
    with pytest.raises(UserInputError, match="not a model checkpoint"):
        load_model(tmp_path)
    (tmp_path / "model.json").write_text(json.dumps({"model": "nope", "args": {}}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(UserInputError, match="unknown model 'nope'"):
        load_model(tmp_path)


#: The slot layout as a checkpoint written before the normalisation statistics had that name
#: stored it (``metadata.layout`` of a heat, Darcy and Burgers model.json).
EARLIER_LAYOUT = {
    "families": ["heat", "darcy", "burgers"],
    "slots": ["u", "a", "p"],
    "n_params": 3,
    "stats": {
        "heat": {"mean": [0.035770810531099234, 0.0, 0.0], "std": [0.7207415757229836, 1.0, 1.0]},
        "darcy": {
            "mean": [0.0, -0.007024894684973612, 0.08538969575943844],
            "std": [1.0, 0.6125862100663971, 0.05179346224016242],
        },
        "burgers": {
            "mean": [-0.028001857439951604, 0.0, 0.0],
            "std": [0.29162840143646374, 1.0, 1.0],
        },
    },
}


def test_an_earlier_checkpoints_layout_loads_to_the_same_layout_written_as_normalisation():
    layout = SlotLayout.from_json(json.loads(json.dumps(EARLIER_LAYOUT)))
    assert layout.normalisation["darcy"]["std"][2] == 0.05179346224016242
    assert Normaliser(layout).std[1, 1].item() == pytest.approx(0.6125862100663971)
    written = json.loads(json.dumps(layout.to_json()))
    assert "stats" not in written and written["normalisation"] == EARLIER_LAYOUT["stats"]
    assert {k: v for k, v in written.items() if k != "normalisation"} == {
        k: v for k, v in EARLIER_LAYOUT.items() if k != "stats"
    }
    assert SlotLayout.from_json(written) == layout
