"""Prefect artifacts the flows publish: a live progress bar, tables, markdown with pictures."""

import base64
import time
from uuid import UUID

from prefect.artifacts import create_progress_artifact, update_progress_artifact


class LiveProgress:
    """A progress artifact updated as work completes, at most once per ``min_interval_s``."""

    def __init__(self, key: str, description: str, min_interval_s: float = 1.0):
        self.description = description
        self.min_interval_s = min_interval_s
        self.id: UUID = create_progress_artifact(0.0, key=key, description=description)
        self._last = 0.0

    def update(self, done: int, total: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or done >= total or now - self._last >= self.min_interval_s:
            percent = 100.0 * done / total if total else 100.0
            update_progress_artifact(self.id, percent, description=self.description)
            self._last = now


def png_markdown(title: str, png: bytes) -> str:
    """A markdown image with the PNG inline (a data URI), so no file server is needed."""
    return f"![{title}](data:image/png;base64,{base64.b64encode(png).decode()})"
