"""One materialization per stage and store at a time: a lock object beside the store.

The lock is ``<store>.materialize-<stage>.lock``, a JSON object (beside, not inside, the Zarr hierarchy, where zarr
would warn about a foreign object), created with an exclusive write (``open(..., "xb")``: atomic on
local disks and on S3 with conditional writes). It records the owner's pid, host, start time and
a heartbeat the owner refreshes while it runs.

Stale-lock rule: a lock is stale when its owner is on this host and its pid is no longer running,
or when its heartbeat is older than ``stale_after`` seconds (any host). A stale lock is taken
over; a live one makes the second run refuse with a message naming the owner.
"""

import json
import os
import socket
import time
import uuid
from typing import Any

import fsspec

from pdeladder.errors import StoreError


class StageLock:
    """Context manager holding the materialization lock of ``stage`` in the store at ``url``."""

    def __init__(self, url: str, stage: str, *, stale_after: float = 120.0):
        self.fs, root = fsspec.core.url_to_fs(url)
        self.url, self.stage, self.stale_after = url, stage, stale_after
        self.path = f"{root.rstrip('/')}.materialize-{stage}.lock"
        self.token = uuid.uuid4().hex
        self.started = self.refreshed = 0.0

    def __enter__(self) -> "StageLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _record(self) -> dict[str, Any]:
        now = time.time()
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": self.started,
            "heartbeat": now,
            "token": self.token,
        }

    def read(self) -> dict[str, Any] | None:
        """The current lock record, or None when there is none."""
        try:
            return json.loads(self.fs.cat_file(self.path))
        except FileNotFoundError:
            return None
        except ValueError:  # half-written by a writer that died: treat as stale
            return {"pid": -1, "host": "", "started": 0, "heartbeat": 0, "token": ""}

    def is_stale(self, rec: dict[str, Any]) -> bool:
        if time.time() - rec["heartbeat"] > self.stale_after:
            return True
        if rec["host"] == socket.gethostname():
            try:
                os.kill(rec["pid"], 0)
            except ProcessLookupError:
                return True
            except PermissionError:  # alive, owned by another user
                return False
        return False

    def acquire(self) -> None:
        self.started = time.time()
        for _ in range(2):
            try:
                with self.fs.open(self.path, "xb") as f:
                    f.write(json.dumps(self._record()).encode())
                self.refreshed = time.monotonic()
                return
            except FileExistsError:
                rec = self.read()
                if rec is None:
                    continue
                if not self.is_stale(rec):
                    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec["started"]))
                    raise StoreError(
                        f"stage {self.stage!r} of {self.url} is being materialized by pid "
                        f"{rec['pid']} on {rec['host']} since {since} (lock {self.path}); wait for "
                        "it to finish, or delete the lock if that process is gone"
                    ) from None
                self.fs.rm_file(self.path)
        raise StoreError(f"{self.url}: could not take the lock {self.path}; retry")

    def refresh(self, every: float | None = None) -> None:
        """Renew the heartbeat (at most once per ``every`` seconds, default ``stale_after / 4``);
        fails if another process has taken the lock over meanwhile."""
        if time.monotonic() - self.refreshed < (every or self.stale_after / 4):
            return
        rec = self.read()
        if rec is None or rec["token"] != self.token:
            raise StoreError(f"{self.url}: lock {self.path} was taken over by another run")
        self.fs.pipe_file(self.path, json.dumps(self._record()).encode())
        self.refreshed = time.monotonic()

    def release(self) -> None:
        rec = self.read()
        if rec is not None and rec["token"] == self.token:
            self.fs.rm_file(self.path)
