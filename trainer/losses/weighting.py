"""Weighting of the loss terms: ``L = w_data · L_data + w_eq · L_eq``."""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossWeights:
    """Weights of the data term (relative L2, plus H1 when ``h1``) and the equation term."""

    data: float = 1.0
    equation: float = 0.0
    h1: bool = False

    def combine(self, data: torch.Tensor, equation: torch.Tensor | None) -> torch.Tensor:
        total = self.data * data
        if equation is not None and self.equation > 0:
            total = total + self.equation * equation
        return total
