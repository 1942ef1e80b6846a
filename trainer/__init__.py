"""The neural-operator trainer: a resolution-invariant Fourier operator over ``(t, x, y, z)``
trained along a curriculum on Ray Train (FSDP2, pickle-free checkpoints), with a PDE-residual
equation loss and a self-improvement phase.

Python API: :func:`train_curriculum` → :class:`TrainResult`; :func:`evaluate_checkpoint` → dict;
:func:`rollout` → a model's prediction of one sample from its initial state.
"""

from pdeladder.lazy import lazy_exports

#: Public name -> module; imported on first use, so ``pdeladder --help`` stays fast.
_EXPORTS = {
    "evaluate_checkpoint": "pdeladder.trainer.evaluate",
    "rollout": "pdeladder.trainer.rollouts",
    "TrainResult": "pdeladder.trainer.training.run",
    "train_curriculum": "pdeladder.trainer.training.run",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["TrainResult", "evaluate_checkpoint", "rollout", "train_curriculum"]
