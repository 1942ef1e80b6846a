"""The files under deploy/, checked at schema level and for consistency with the code.

Ray's cluster-launcher YAML is validated against the JSON schema Ray ships; the KubeRay manifests
against the fields the operator requires; commands against the pdeladder CLI itself; the Prefect
deployments against the flows' parameter schemas.
"""

import json
import re
import shlex
import tomllib
from pathlib import Path

import jsonschema
import pytest
import ray
import typer.core
import typer.main
import yaml

from pdeladder.cli import app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"ghcr.io/pdeladder/pdeladder:{VERSION}"


def load(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def check_command(command: str) -> None:
    """Parse a ``pdeladder ...`` command line with the real CLI, without running it; an unknown
    command or option, or a missing argument, raises a usage error."""
    argv = shlex.split(command)
    assert argv[0] == "pdeladder", command
    cmd, ctx, name, rest = typer.main.get_command(app), None, "pdeladder", argv[1:]
    while isinstance(cmd, typer.core.TyperGroup):
        ctx = cmd.context_class(cmd, info_name=name, parent=ctx)
        name, rest = rest[0], rest[1:]
        cmd = cmd.get_command(ctx, name)
        assert cmd is not None, f"{command}: no command {name!r}"
    with cmd.make_context(name, rest, parent=ctx) as sub:
        assert sub.params


def containers(pod_template: dict) -> list[dict]:
    return pod_template["spec"]["containers"]


def check_ray_cluster_spec(spec: dict) -> None:
    """What KubeRay requires of a RayCluster spec, and what pdeladder's pods need."""
    assert spec["rayVersion"] == ray.__version__
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    for group in groups:
        params = group["rayStartParams"]
        assert all(isinstance(v, str) for v in params.values()), "rayStartParams are strings"
        for c in containers(group["template"]):
            assert c["image"] == IMAGE
            res = c["resources"]
            for key in ("cpu", "memory"):
                assert res["requests"][key] == res["limits"][key], f"{c['name']}: {key}"
            assert {"secretRef": {"name": "pdeladder-s3"}} in c["envFrom"]
            assert {"name": "runs", "mountPath": "/home/ray/runs"} in c["volumeMounts"]
    head = containers(spec["headGroupSpec"]["template"])[0]
    assert {p["containerPort"] for p in head["ports"]} >= {6379, 8265, 10001}
    for w in spec["workerGroupSpecs"]:
        assert w["groupName"]
        assert 0 <= w["minReplicas"] <= w["replicas"] <= w["maxReplicas"]


def test_cluster_launcher_config_matches_rays_schema():
    config = load("ray-cluster.yaml")
    schema = json.loads((Path(ray.__file__).parent / "autoscaler/ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    assert config["docker"]["image"] == IMAGE
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    assert sum(t.get("max_workers", 0) for t in types.values()) <= config["max_workers"] * 2
    assert any("--dashboard-host=127.0.0.1" in c for c in config["head_start_ray_commands"])


def test_kuberay_raycluster():
    doc = load("kuberay/raycluster.yaml")
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayCluster")
    assert doc["metadata"]["name"] == "pdeladder"
    check_ray_cluster_spec(doc["spec"])


def test_kuberay_rayjob_runs_a_real_cli_command():
    doc = load("kuberay/rayjob.yaml")
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayJob")
    spec = doc["spec"]
    assert spec["submissionMode"] in {"K8sJobMode", "HTTPMode", "SidecarMode", "InteractiveMode"}
    assert spec["shutdownAfterJobFinishes"] is True
    assert "runtimeEnvYAML" not in spec  # its env_vars would clash with the training driver's
    check_ray_cluster_spec(spec["rayClusterSpec"])
    check_command(spec["entrypoint"])
    assert (ROOT / shlex.split(spec["entrypoint"])[2]).is_file()  # the curriculum is in the image


def test_runs_volume_is_shared():
    doc = load("kuberay/runs-volume.yaml")
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "PersistentVolumeClaim")
    assert doc["metadata"]["name"] == "pdeladder-runs"
    assert doc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_prefect_yaml_matches_the_served_deployments():
    from prefect.flows import load_flow_from_entrypoint

    from pdeladder.flows.deployments import deployments

    doc = load("prefect.yaml")
    served = {d.name: d for d in deployments()}
    assert {d["name"] for d in doc["deployments"]} == set(served)
    for d in doc["deployments"]:
        flow = load_flow_from_entrypoint(d["entrypoint"], use_placeholder_flow=False)
        assert flow.name == served[d["name"]].flow_name
        flow.validate_parameters(d["parameters"])  # raises on a field the flow does not take
        pool = d["work_pool"]
        assert pool["name"] == "pdeladder" and pool["job_variables"]["image"] == IMAGE
    [pull] = doc["pull"]
    assert pull["prefect.deployments.steps.set_working_directory"]["directory"] == "/opt/pdeladder"


def test_dockerfile_installs_every_package_and_the_same_ray():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.12", text, re.M)
    assert re.search(rf"^ARG RAY_VERSION={re.escape(ray.__version__)}$", text, re.M)
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    copied = set(re.findall(r"^COPY (\S+) \1$", text, re.M))
    assert set(package_dirs.values()) | {"examples"} <= copied
    assert IMAGE in text


@pytest.mark.parametrize(
    "command",
    [
        "pdeladder flows serve --port 4300 --limit 2",
        "pdeladder curriculum materialize examples/quickstart.yaml --workers 4",
    ],
)
def test_commands_in_the_docs_parse(command: str):
    check_command(command)


def test_the_ray_job_command_of_the_train_flow_parses():
    from pdeladder.flows.train import TrainRun, train_command
    from pdeladder.flows.train_job import train_job

    run = TrainRun(stages=["line", "plane"], store_url="s3://b/s.zarr", workers=3, run_dir="/r")
    argv = shlex.split(train_command(run, "curriculum.yaml"))
    assert argv[:3] == ["python", "-m", "pdeladder.flows.train_job"]
    job_app = typer.Typer()
    job_app.command()(train_job)
    with typer.main.get_command(job_app).make_context("train_job", argv[3:]) as ctx:
        assert list(ctx.params["stage"]) == ["line", "plane"]
        assert (ctx.params["store"], ctx.params["workers"]) == ("s3://b/s.zarr", 3)
        assert str(ctx.params["run_dir"]) == "/r"
