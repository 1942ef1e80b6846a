"""Prefect artifacts the flows publish: a live progress bar, tables, markdown with pictures."""

import base64
import threading
import time
from uuid import UUID

from prefect.artifacts import create_progress_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import ArtifactUpdate


class LiveProgress:
    """A progress artifact updated as work completes, at most once per ``min_interval_s``.

    Use it as a context manager: it holds one API client for its updates, which may come from
    other threads (the trainer reports metrics from one).
    """

    def __init__(self, key: str, description: str, min_interval_s: float = 1.0):
        self.key = key
        self.description = description
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> "LiveProgress":
        self.id: UUID = create_progress_artifact(0.0, key=self.key, description=self.description)
        self._client = get_client(sync_client=True).__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.__exit__(*exc_info)

    def update(self, done: int, total: int, *, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if force or done >= total or now - self._last >= self.min_interval_s:
                percent = 100.0 * done / total if total else 100.0
                self._client.update_artifact(self.id, ArtifactUpdate(data=percent))
                self._last = now


def png_markdown(title: str, png: bytes) -> str:
    """A markdown image with the PNG inline (a data URI), so no file server is needed."""
    return f"![{title}](data:image/png;base64,{base64.b64encode(png).decode()})"
