"""The neural operator and its pickle-free checkpoints."""

from pdeladder.trainer.models.checkpoint import load_model, save_model
from pdeladder.trainer.models.operator import MODELS, LadderOperator, OperatorConfig

__all__ = ["MODELS", "LadderOperator", "OperatorConfig", "load_model", "save_model"]
