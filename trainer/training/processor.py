"""Moved to :mod:`pdeladder.trainer.processor` (issue 33, item 3): inference and training both use
the data processor, so it sits below both (it was here, and inference imported training while
training's validation imported inference). Kept for trainer/evaluate.py and benchmarks/, which
still import it from here."""

from pdeladder.trainer.processor import DataProcessor

__all__ = ["DataProcessor"]
