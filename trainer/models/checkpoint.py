"""Model checkpoints without pickles: ``model.json`` (class name, JSON arguments, metadata) beside
``model.safetensors`` (the full, unsharded weights).

A model is rebuilt from the folder alone, without knowing its class::

    save_model(model, "ckpt/", {"stage": "warmup", "step": 400})
    model, metadata = load_model("ckpt/")
"""

import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from pdeladder.errors import UserInputError
from pdeladder.trainer.layers.spectral import from_in_out_layout
from pdeladder.trainer.models.operator import MODELS, LadderOperator, OperatorConfig

CONFIG_FILE, WEIGHTS_FILE = "model.json", "model.safetensors"
#: The spectral weights' layout in the checkpoints written now (``model.json``'s
#: ``weight_layout``; in-process resume keys include it); a checkpoint without one holds them
#: ``(in, out, modes.., 2)``, converted on load (:func:`~pdeladder.trainer.layers.spectral.
#: from_in_out_layout`).
WEIGHT_LAYOUT = "mode_major"


def save_model(
    model: LadderOperator, folder: str | Path, metadata: dict[str, Any], state=None
) -> Path:
    """Write ``model`` (or the full ``state`` dict given for it) and JSON ``metadata`` to ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = model.state_dict() if state is None else state
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, folder / WEIGHTS_FILE)
    doc = {
        "model": model.name,
        "args": model.config.to_json(),
        "weight_layout": WEIGHT_LAYOUT,
        "metadata": metadata,
    }
    (folder / CONFIG_FILE).write_text(json.dumps(doc, indent=2))
    return folder


def read_model_json(folder: str | Path) -> dict[str, Any]:
    """The checkpoint's ``model.json``; a clear error when ``folder`` holds no model."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file() or not (Path(folder) / WEIGHTS_FILE).is_file():
        raise UserInputError(
            f"{folder}: not a model checkpoint (needs {CONFIG_FILE} and {WEIGHTS_FILE})"
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise UserInputError(f"{path}: damaged, not JSON ({err}); save the model again") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("args"), dict):
        raise UserInputError(f"{path}: damaged, no model arguments; save the model again")
    if doc.get("model") not in MODELS:
        raise UserInputError(
            f"{path}: unknown model {doc.get('model')!r}; known: {', '.join(MODELS)}"
        )
    return doc


def load_model(
    folder: str | Path, map_location: str = "cpu"
) -> tuple[LadderOperator, dict[str, Any]]:
    """Rebuild the model saved in ``folder``; returns (model, metadata). Spectral weights of
    the layout before :data:`WEIGHT_LAYOUT` are converted to it (the same function)."""
    doc = read_model_json(folder)
    check_device(map_location)
    try:
        model = MODELS[doc["model"]](OperatorConfig.from_json(doc["args"]))
    except (TypeError, ValueError, KeyError, RuntimeError) as err:
        raise UserInputError(
            f"{Path(folder) / CONFIG_FILE}: damaged model arguments ({err}); save the model again"
        ) from None
    try:
        state = load_file(Path(folder) / WEIGHTS_FILE, device=map_location)
    except Exception as err:  # safetensors raises its own SafetensorError on damaged bytes
        raise UserInputError(
            f"{Path(folder) / WEIGHTS_FILE}: damaged weights ({err}); save the model again"
        ) from None
    layout = doc.get("weight_layout")
    if layout is None:
        state = {
            k: from_in_out_layout(v, model.config.modes) if k.endswith("spectral.weight") else v
            for k, v in state.items()
        }
    elif layout != WEIGHT_LAYOUT:
        raise UserInputError(
            f"{folder}: weight_layout {layout!r} is not {WEIGHT_LAYOUT!r}, the one this version reads"
        )
    try:
        model.load_state_dict(state)
    except RuntimeError as err:  # missing, unexpected or differently shaped weights
        first = str(err).splitlines()[1].strip() if "\n" in str(err) else str(err)
        raise UserInputError(
            f"{folder}: the weights do not match model.json's arguments ({first}); "
            "save the model again"
        ) from None
    return model, doc.get("metadata", {})


def check_device(device: str) -> None:
    """Refuse a torch ``device`` that is not one or not on this machine (one line)."""
    import torch

    try:
        kind = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise UserInputError(f"--device {device!r}: not a torch device ({err})") from None
    if kind.type == "cuda" and (
        not torch.cuda.is_available() or (kind.index or 0) >= torch.cuda.device_count()
    ):
        raise UserInputError(f"--device {device}: no such CUDA device on this machine; use cpu")
    backend = getattr(torch, kind.type, None)
    if kind.type != "cpu" and not (backend and backend.is_available()):
        raise UserInputError(f"--device {device}: not available on this machine; use cpu")
