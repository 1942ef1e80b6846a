"""A group as an :class:`xarray.Dataset`, every per-sample record a variable of its own.

``xarray.open_zarr`` shows a group as stored: a sample's seed, parameters, solver statistics,
moments and checksum are one fixed-width ``record`` of bytes
(:func:`pdeladder.dataset.format.record_fields`). :func:`open_group` decodes it into one
variable each, ``seed (sample)``, ``params (sample, parameter)``, ``stats (sample, stat)``,
``moments (sample, channel, moment)`` and ``checksum (sample)``; the ``fields`` stay lazy. A
sample is data only where ``status == 1`` (ok).
"""

from typing import Any

import xarray as xr

from pdeladder.dataset import format as fmt
from pdeladder.dataset.store import absolute_url


def open_group(url: str, group: str, storage_options: dict[str, Any] | None = None) -> xr.Dataset:
    """The group ``group`` (``stage/family/2d_n33_t11``) of the store at ``url``, decoded."""
    ds = xr.open_zarr(
        absolute_url(url), group=group, consolidated=False, storage_options=storage_options
    )
    fmt.check_version(ds.attrs, f"{url}::{group}")
    rows = ds["record"].values.view(fmt.record_dtype(ds.attrs))[:, 0]
    decoded = {
        f["name"]: (("sample", *f["dims"]), rows[f["name"]], {"long_name": f["long_name"]})
        for f in ds["record"].attrs["record_fields"]
    }
    return ds.drop_vars("record").assign(decoded)
