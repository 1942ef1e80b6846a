"""Model checkpoints without pickles: ``model.json`` (class name, JSON arguments, metadata) beside
``model.safetensors`` (the full, unsharded weights).

A model is rebuilt from the folder alone, without knowing its class::

    save_model(model, "ckpt/", {"stage": "warmup", "step": 400})
    model, metadata = load_model("ckpt/")
"""

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from pdeladder.errors import UserInputError
from pdeladder.trainer.models.operator import MODELS, LadderOperator, OperatorConfig

CONFIG_FILE, WEIGHTS_FILE = "model.json", "model.safetensors"


def save_model(
    model: LadderOperator, folder: str | Path, metadata: dict[str, Any], state=None
) -> Path:
    """Write ``model`` (or the full ``state`` dict given for it) and JSON ``metadata`` to ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = model.state_dict() if state is None else state
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, folder / WEIGHTS_FILE)
    doc = {"model": model.name, "args": model.config.to_json(), "metadata": metadata}
    (folder / CONFIG_FILE).write_text(json.dumps(doc, indent=2))
    return folder


def read_model_json(folder: str | Path) -> dict[str, Any]:
    """The checkpoint's ``model.json``; a clear error when ``folder`` holds no model."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file() or not (Path(folder) / WEIGHTS_FILE).is_file():
        raise UserInputError(
            f"{folder}: not a model checkpoint (needs {CONFIG_FILE} and {WEIGHTS_FILE})"
        )
    doc = json.loads(path.read_text())
    if doc.get("model") not in MODELS:
        raise UserInputError(
            f"{path}: unknown model {doc.get('model')!r}; known: {', '.join(MODELS)}"
        )
    return doc


def load_model(
    folder: str | Path, map_location: str = "cpu"
) -> tuple[LadderOperator, dict[str, Any]]:
    """Rebuild the model saved in ``folder``; returns (model, metadata)."""
    doc = read_model_json(folder)
    model = MODELS[doc["model"]](OperatorConfig.from_json(doc["args"]))
    state = load_file(Path(folder) / WEIGHTS_FILE, device=map_location)
    model.load_state_dict(state)
    return model, doc["metadata"]


def load_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """The full weights of a checkpoint, as a state dict of tensors."""
    read_model_json(folder)
    return load_file(Path(folder) / WEIGHTS_FILE)
