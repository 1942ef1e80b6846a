"""The flows' default parameters work from any folder: the default curriculum is the quick-start
example installed with pdeladder (package data), not a path relative to the current folder.

The server test submits each deployment's default form, as the Prefect UI fills it from the
deployment's parameter schema, to ``pdeladder flows serve`` running in an empty folder, and
follows each run past the point where the relative default used to fail (loading the curriculum;
two tracebacks in the run log), then cancels it: the whole default campaign is the demo.
"""

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from pdeladder import examples
from pdeladder.errors import UserInputError
from pdeladder.flows.closed_loop import Loop
from pdeladder.flows.data_campaign import Campaign
from pdeladder.flows.train import TrainRun

CHECKOUT_EXAMPLES = Path(__file__).parents[2] / "examples"
ENDED = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def test_every_example_curriculum_is_package_data():
    assert examples.names() == sorted(p.name for p in CHECKOUT_EXAMPLES.glob("*.yaml"))
    for name in examples.names():
        assert examples.path(name).read_bytes() == (CHECKOUT_EXAMPLES / name).read_bytes()


@pytest.mark.parametrize("name", ["missing.yaml", "__init__.py", "quickstart"])
def test_an_unknown_example_names_the_available_ones(name: str):
    with pytest.raises(UserInputError, match=r"no example curriculum .*full\.yaml.*quickstart"):
        examples.path(name)


@pytest.mark.parametrize("model", [Campaign, TrainRun, Loop])
def test_the_default_curriculum_loads_from_an_empty_folder(model, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = model()
    assert Path(source.curriculum).is_absolute()
    assert Path(source.curriculum) == examples.path("quickstart.yaml")
    assert source.load().name == "quickstart"
    assert source.yaml_text() == (CHECKOUT_EXAMPLES / "quickstart.yaml").read_text()


def default_form(schema: dict[str, Any]) -> dict[str, Any]:
    """The parameters the UI's run form submits untouched: the one model parameter of the flow,
    each of its fields at the default the schema shows (a field without one, a list built by a
    default factory, is left out, as the form leaves it empty)."""
    [(name, prop)] = schema["properties"].items()
    model = schema["definitions"][prop["$ref"].rsplit("/", 1)[-1]]
    return {name: {k: v["default"] for k, v in model["properties"].items() if "default" in v}}


def run_logs(api: str, run_id: str) -> list[str]:
    body = {"logs": {"flow_run_id": {"any_": [run_id]}}, "sort": "TIMESTAMP_ASC", "limit": 200}
    return [e["message"] for e in httpx.post(f"{api}/logs/filter", json=body, timeout=10).json()]


def run_state(api: str, run_id: str) -> str:
    return httpx.get(f"{api}/flow_runs/{run_id}", timeout=10).json()["state"]["type"]


def wait_for_line(api: str, run_id: str, starts: str, timeout_s: float = 300) -> str:
    """The run's first log line that starts with ``starts``; fails when the run ends first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        logs = run_logs(api, run_id)
        if found := [line for line in logs if line.startswith(starts)]:
            return found[0]
        if (state := run_state(api, run_id)) in ENDED:
            pytest.fail(f"run ended {state} before logging {starts!r}:\n" + "\n".join(logs))
        time.sleep(1)
    pytest.fail(f"no {starts!r} within {timeout_s} s:\n" + "\n".join(run_logs(api, run_id)))


def cancel(api: str, run_id: str, timeout_s: float = 120) -> None:
    """Cancel the run and wait for it to end (the server runs one flow at a time)."""
    state = {"type": "CANCELLING", "name": "Cancelling"}
    httpx.post(
        f"{api}/flow_runs/{run_id}/set_state", json={"state": state, "force": True}, timeout=10
    ).raise_for_status()
    deadline = time.monotonic() + timeout_s
    while run_state(api, run_id) not in ENDED and time.monotonic() < deadline:
        time.sleep(1)


# Serial: each run starts a process of its own beside the served Prefect server.
@pytest.mark.serial
def test_every_default_form_runs_from_an_empty_folder(served: str, tmp_path: Path):
    """``served`` is ``pdeladder flows serve`` started in ``tmp_path``, an empty folder (but
    for the test's Prefect home)."""
    assert {p.name for p in tmp_path.iterdir()} <= {"prefect"}
    api = f"{served}/api"
    deployments: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 120  # serve registers them after printing the UI's address
    while len(deployments) < 3 and time.monotonic() < deadline:
        found = httpx.post(f"{api}/deployments/filter", json={}, timeout=10).json()
        deployments = {d["name"]: d for d in found}
        time.sleep(1)
    assert set(deployments) == {"data-campaign", "train", "closed-loop"}
    stages = "['line', 'plane', 'refine']"
    expected = {  # the line each flow logs once its curriculum is loaded
        "data-campaign": f"quickstart: 1344 samples in stages {stages} into ./stores/quickstart.zarr",
        "train": f"quickstart: training stages {stages} on ./stores/quickstart.zarr (local), "
        "run files in runs/train",
        "closed-loop": f"quickstart: climbing stages {stages}, store ./stores/quickstart.zarr, "
        f"run files in {os.path.realpath(tmp_path)}/runs/closed-loop",
    }
    for name, line in expected.items():
        deployment = deployments[name]
        parameters = default_form(deployment["parameter_openapi_schema"])
        [fields] = parameters.values()
        assert fields["curriculum"] == str(examples.path("quickstart.yaml"))
        created = httpx.post(
            f"{api}/deployments/{deployment['id']}/create_flow_run",
            json={"parameters": parameters},
            timeout=10,
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        try:
            logged = wait_for_line(api, run_id, "quickstart: ")
            logs = "\n".join(run_logs(api, run_id))  # before the cancel, which aborts the run
        finally:
            cancel(api, run_id)
        assert logged == line
        assert "Traceback" not in logs and "cannot read curriculum" not in logs, logs
