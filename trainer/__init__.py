"""The neural-operator trainer: a resolution-invariant Fourier operator over ``(t, x, y, z)``
trained along a curriculum on Ray Train (FSDP2, pickle-free checkpoints), with a PDE-residual
equation loss and a self-improvement phase.

Python API: :func:`train_curriculum` → :class:`TrainResult`; :func:`evaluate_checkpoint` → dict.
"""

from pdeladder.trainer.evaluate import evaluate_checkpoint
from pdeladder.trainer.training.run import TrainResult, train_curriculum

__all__ = ["TrainResult", "evaluate_checkpoint", "train_curriculum"]
