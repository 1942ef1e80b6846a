"""Losses: relative L2/H1 data losses with quadrature weights, the PDE-residual equation loss,
and their weighting."""

from pdeladder.trainer.losses.data import relative_errors, relative_loss, trapezoid_weights
from pdeladder.trainer.losses.equation import equation_loss, family_views, relative_residual
from pdeladder.trainer.losses.weighting import combine

__all__ = [
    "combine",
    "equation_loss",
    "family_views",
    "relative_errors",
    "relative_loss",
    "relative_residual",
    "trapezoid_weights",
]
