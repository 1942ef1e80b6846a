"""The stale-lock takeover of `materialize` with two real processes racing for one stale lock:
each is delayed after judging the lock stale (the injected fault, at the race point), one longer
than the other, so the late one acts on the lock its rival has just taken: exactly one holds."""

import json
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pdeladder.curriculum.lock import StageLock

# One contender: says it is ready, waits for GO, takes the lock (is_stale delayed by DELAY s when it says stale),
# holds it for 1.5 s and then checks that the lock is still its own.
_CONTENDER = textwrap.dedent(
    """
    import json, os, sys, time
    from pdeladder.curriculum.lock import StageLock
    from pdeladder.errors import StoreError

    url, go, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    is_stale = StageLock.is_stale

    def delayed(self, rec):
        stale = is_stale(self, rec)
        if stale:
            time.sleep(delay)
        return stale

    StageLock.is_stale = delayed
    open(f"{go}.ready.{os.getpid()}", "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    lock = StageLock(url, "s0")
    try:
        lock.acquire()
    except StoreError as err:
        print(json.dumps({"held": False, "error": str(err)}))
        sys.exit(0)
    time.sleep(1.5)
    kept = (lock.read() or {}).get("token") == lock.token
    lock.release()
    print(json.dumps({"held": True, "kept": kept}))
    """
)


@pytest.mark.parametrize("round", range(4))
def test_two_processes_racing_for_a_stale_lock_never_both_hold_it(tmp_path: Path, round: int):
    url = str(tmp_path / "store.zarr")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: its lock is stale
    lock = StageLock(url, "s0")
    record = {"pid": dead.pid, "host": socket.gethostname(), "started": 0, "token": "dead"}
    Path(lock.path).write_text(json.dumps({**record, "heartbeat": time.time()}))
    go = tmp_path / "sync" / "go"
    go.parent.mkdir()
    delays = (0.1, 0.6) if round % 2 else (0.6, 0.1)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONTENDER, url, str(go), str(d)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for d in delays
    ]
    deadline = time.monotonic() + 60
    while len(list(go.parent.iterdir())) < 2:  # both imported and waiting
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    held = [r for r in results if r["held"]]
    assert len(held) == 1 and held[0]["kept"], results
    (refused,) = [r for r in results if not r["held"]]
    assert "is being materialized by pid" in refused["error"]
    assert [p.name for p in tmp_path.iterdir()] == ["sync"]  # the lock and claims are gone
