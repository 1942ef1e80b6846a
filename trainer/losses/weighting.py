"""Weighting of the loss terms: ``L = data · L_data + residual · L_eq``, the weights the
curriculum's ``training.loss`` (:class:`~pdeladder.curriculum.settings.LossWeights`)."""

import torch

from pdeladder.curriculum.settings import LossWeights


def combine(
    weights: LossWeights, data: torch.Tensor, equation: torch.Tensor | None
) -> torch.Tensor:
    """The weighted loss: ``weights.data`` times the data loss (relative L2, or H1 with
    ``weights.h1``) plus ``weights.residual`` times the equation loss (the PDE residual), where
    that weight is positive and the term was computed."""
    total = weights.data * data
    if equation is not None and weights.residual > 0:
        total = total + weights.residual * equation
    return total
