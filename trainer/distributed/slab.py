"""Moved to :mod:`pdeladder.slabs` (issue 33, item 3: a slab is a property of the data, which the
layers and the store read without importing distribution). Kept for benchmarks/, which still
import :class:`DomainTiling` from here; import it from :mod:`pdeladder.slabs`."""

from pdeladder.slabs import DomainTiling, Slab, bounds, input_slab, padding

__all__ = ["DomainTiling", "Slab", "bounds", "input_slab", "padding"]
