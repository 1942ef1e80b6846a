"""Campaigns and training on a multi-node Ray cluster (:mod:`tests.cluster`: a head and worker
nodes, each in a network namespace of its own): samples and gangs land on several nodes, on a
path store and on an ``s3://`` store; a node that joins is used and a node lost mid-campaign
loses nothing, the store equal to a one-machine run's bit for bit, and so does a gang whose
rank is killed; domain-parallel training
across two nodes ends with one process's model, a node lost under training with an undisturbed
run's; training is submitted as a Ray job from a machine outside the cluster."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pdeladder.curriculum import materialize, parse_curriculum
from pdeladder.dataset.format import OK
from pdeladder.dataset.store import open_store

from . import cluster as nodes

pytestmark = pytest.mark.skipif(nodes.available() is not None, reason=str(nodes.available()))

PDELADDER = str(Path(sys.executable).with_name("pdeladder"))

CAMPAIGN = """\
name: cluster
seed: 11
stages:
  - name: s0
    families:
      - family: heat
        dims: [2]
        resolutions: [{resolution}]
        snapshots: 5
        samples: {samples}
      - family: burgers
        dims: [2]
        resolutions: [9]
        snapshots: 3
        samples: 2
        ranks_per_sample: 2
"""
GROUP = "s0/heat/2d_n{resolution}_t5"
GANGS = "s0/burgers/2d_n9_t3"


def assert_equal_stores(a_url: str, b_url: str, resolution: int) -> None:
    """Every group of the campaign complete in both, and bit for bit the same."""
    for path in (GROUP.format(resolution=resolution), GANGS):
        a, b = open_store(a_url).group(path), open_store(b_url).group(path)
        assert (a.status() == OK).all(), (path, a.status())
        for name in ("status", "seed", "params", "checksum"):
            np.testing.assert_array_equal(a.column(name), b.column(name), err_msg=name)
        np.testing.assert_array_equal(a.array("fields")[...], b.array("fields")[...])


def reference(tmp_path: Path, **sizes: int) -> str:
    """The campaign solved on this machine's own Ray runtime."""
    url = str(tmp_path / "reference.zarr")
    summary = materialize(parse_curriculum(CAMPAIGN.format(**sizes)), store_url=url)
    assert summary.failed == 0
    return url


def verified(c: nodes.Cluster, url: str) -> None:
    """``pdeladder store verify`` on the head (where an ``s3://`` store's endpoint is)."""
    c.call("head", PDELADDER, "store", "verify", url, timeout=300)


def assert_same_model(a: Path, b: Path, rtol: float) -> None:
    """The stage models in run folders ``a`` and ``b`` hold the same weights to ``rtol`` of
    each tensor's largest magnitude."""
    from safetensors.torch import load_file

    wa, wb = (load_file(r / "stages" / "s0" / "model" / "model.safetensors") for r in (a, b))
    assert wa.keys() == wb.keys()
    for k in wa:
        assert (wa[k] - wb[k]).abs().max() <= rtol * (1 + wa[k].abs().max()), k


#: Make the bucket once the cluster's S3 endpoint answers.
MAKE_BUCKET = """
import time, s3fs
for _ in range(300):
    try:
        s3fs.S3FileSystem().mkdir("pdeladder")
        break
    except Exception:
        time.sleep(0.2)
else:
    raise SystemExit("the S3 endpoint did not answer in 60 s")
"""


@pytest.mark.parametrize("shared", ["path", pytest.param("s3", marks=pytest.mark.slow)])  # CI time
def test_a_campaign_spreads_over_the_nodes_and_equals_one_machines(
    shared: str, ray_local: None, tmp_path: Path
) -> None:
    """The driver on the head; single-rank samples on actors of both worker nodes (spread),
    2-rank gangs on one node each (``mpiexec`` inside the node); the store, a path every node
    sees or an ``s3://`` store on an S3 endpoint of the cluster's network, verifies and equals
    the same campaign solved on one machine."""
    (tmp_path / "c.yaml").write_text(CAMPAIGN.format(samples=8, resolution=17))
    ref = reference(tmp_path, samples=8, resolution=17)
    with nodes.cluster({"w1": 2, "w2": 2}, s3=shared == "s3") as c:  # a head of 0 CPUs
        url = str(tmp_path / "cluster.zarr")
        if shared == "s3":
            c.python("head", MAKE_BUCKET)
            url = "s3://pdeladder/cluster.zarr"
        out = c.call("head", PDELADDER, "curriculum", "materialize", str(tmp_path / "c.yaml"),
                     "--store", url, "--workers", "2", "--address", c.address)  # fmt: skip
        # the actors are spread, but a gang may hold a node's CPUs when they are placed: each
        # worker node ran some of the work, the head none
        for node in ("w1", "w2"):
            assert c.ran(node, "Solver") + c.ran(node, "gang_solve"), (node, out)
        assert c.ran("w1", "gang_solve") + c.ran("w2", "gang_solve"), out
        assert not c.ran("head", "Solver") + c.ran("head", "gang_solve")
        verified(c, url)
        c.python("head", "from tests.test_cluster import assert_equal_stores as equal\n"
                 f"equal({url!r}, {ref!r}, 17)")  # fmt: skip


def test_a_lost_node_loses_nothing_and_a_node_that_joins_is_used(
    ray_local: None, tmp_path: Path
) -> None:
    """Three actors on a cluster whose one worker node has 2 CPUs: two solve there, the third
    waits for a node (it holds its first samples, so the campaign cannot end without one). The
    node is killed mid-campaign (every process of its namespace, SIGKILL); a node of 3 CPUs
    then joins: the three actors start there, the lost node's samples are solved again, and
    the campaign ends complete, verified, equal to one machine's bit for bit."""
    sizes = {"samples": 40, "resolution": 33}
    with nodes.cluster({"w1": 2}) as c:
        url = str(tmp_path / "cluster.zarr")
        (tmp_path / "c.yaml").write_text(CAMPAIGN.format(**sizes))
        group = GROUP.format(**sizes)
        run = c.run("head", PDELADDER, "curriculum", "materialize", str(tmp_path / "c.yaml"),
                    "--store", url, "--workers", "3", "--address", c.address,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip

        def solved() -> int:
            try:
                return int((open_store(url).group(group).status() == OK).sum())
            except Exception:  # not created yet
                return 0

        deadline = time.monotonic() + 300
        while not (c.ran("w1", "Solver") >= 2 and solved() >= 2):
            assert run.poll() is None, run.communicate()[0]
            assert time.monotonic() < deadline, "no samples solved on w1 in 300 s"
            time.sleep(0.2)
        c.kill("w1")
        left = sizes["samples"] - solved()
        assert left > 2 and run.poll() is None  # w1's actors had samples to lose
        c.start("w2", 3)
        out, _ = run.communicate(timeout=600)
        assert run.returncode == 0, out
        assert c.ran("w2", "Solver") >= 3, out  # w1's two actors restarted, and the third
        assert f"{sizes['samples'] + 2} solved, 0 failed" in out, out
        verified(c, url)
        assert_equal_stores(url, reference(tmp_path, **sizes), sizes["resolution"])


def kill_a_rank(c: nodes.Cluster) -> str | None:
    """SIGKILL the first rank of a slab solve (a gang's ``mpiexec`` process) found on a worker
    node; the node's name, or None when no rank runs yet."""
    for name in ("w1", "w2"):
        for pid in c.nodes[name].pids():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[1:3] == [b"-m", b"pdeladder.curriculum.slab_solve"]:
                os.kill(pid, signal.SIGKILL)
                return name
    return None


@pytest.mark.slow  # the fault matrix's gang case; a lost node in CI: the campaign's
def test_a_killed_rank_of_a_gang_is_solved_again_and_equals_one_machines(
    ray_local: None, tmp_path: Path
) -> None:
    """One rank of a 2-rank gang on a worker node is killed (SIGKILL) while it solves: the
    gang's sample is solved again, and the campaign ends complete, verified and equal to one
    machine's bit for bit (a gang's sample is bitwise reproducible for a given K)."""
    sizes = {"samples": 4, "resolution": 17}
    with nodes.cluster({"w1": 2, "w2": 2}) as c:
        url = str(tmp_path / "cluster.zarr")
        (tmp_path / "c.yaml").write_text(CAMPAIGN.format(**sizes))
        run = c.run("head", PDELADDER, "curriculum", "materialize", str(tmp_path / "c.yaml"),
                    "--store", url, "--workers", "2", "--address", c.address,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        deadline = time.monotonic() + 300
        while (killed := kill_a_rank(c)) is None:
            assert run.poll() is None, run.communicate()[0]
            assert time.monotonic() < deadline, "no rank of a gang seen in 300 s"
            time.sleep(0.05)
        out, _ = run.communicate(timeout=600)
        assert run.returncode == 0, out
        assert c.ran(killed, "gang_solve"), out
        assert f"{sizes['samples'] + 2} solved, 0 failed" in out, out
        verified(c, url)
        assert_equal_stores(url, reference(tmp_path, **sizes), sizes["resolution"])


TRAINING = """\
name: cluster-train
seed: 3
model: {width: 4, modes: 2, layers: 1}
stages:
  - name: s0
    families:
      - family: heat
        dims: [2]
        resolutions: [17]
        snapshots: 5
        samples: 8
    training: {steps: 6, batch_size: 2, threads: 1}
"""


def test_domain_parallel_training_across_two_nodes_equals_one_process(
    ray_local: None, tmp_path: Path
) -> None:
    """``train --domain-ranks 2`` from the head of a cluster whose two worker nodes have one
    CPU each: the two Ray Train workers of the sample's x slabs run one on each node (gloo
    between the nodes' addresses), and the model they end with is the one a single process
    trains."""
    (tmp_path / "t.yaml").write_text(TRAINING)
    store = str(tmp_path / "s.zarr")
    assert materialize(parse_curriculum(TRAINING), store_url=store).failed == 0
    one = subprocess.run(
        [PDELADDER, "train", str(tmp_path / "t.yaml"), "--store", store, "--run-dir",
         str(tmp_path / "one"), "--workers", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert one.returncode == 0, one.stdout + one.stderr
    with nodes.cluster({"w1": 1, "w2": 1}) as c:
        out = c.call("head", PDELADDER, "train", str(tmp_path / "t.yaml"), "--store", store,
                     "--run-dir", str(tmp_path / "two"), "--workers", "2", "--domain-ranks", "2",
                     "--address", c.address)  # fmt: skip
        assert c.ran("w1", "RayTrainWorker") and c.ran("w2", "RayTrainWorker"), out
    assert_same_model(tmp_path / "one", tmp_path / "two", 1e-5)


def registered_step(run: Path) -> int:
    """The step of the latest checkpoint Ray Train's controller has registered in ``run``
    (its snapshot in the run folder), 0 before the first."""
    for path in run.glob("ray/*/checkpoint_manager_snapshot.json"):
        try:  # written in place: a read may see it half written
            latest = json.loads(path.read_text())["latest_checkpoint_result"]
        except (OSError, ValueError):
            continue
        if latest is not None:
            return latest["metrics"]["step"]
    return 0


@pytest.mark.slow  # the fault matrix's training half; a lost node in CI: the campaign's
def test_a_node_lost_under_training_resumes_to_an_undisturbed_runs_weights(
    ray_local: None, tmp_path: Path
) -> None:
    """``train --workers 2`` on three worker nodes of one CPU: once a checkpoint is registered,
    a node that holds a Ray Train worker is killed; Ray Train starts the group again on the two
    nodes left, from that checkpoint, and the model it ends with is an undisturbed run's."""
    text = TRAINING.replace("steps: 6,", "steps: 60,")
    (tmp_path / "t.yaml").write_text(text)
    store = str(tmp_path / "s.zarr")
    assert materialize(parse_curriculum(text), store_url=store).failed == 0
    args = ["train", str(tmp_path / "t.yaml"), "--store", store, "--workers", "2",
            "--checkpoint-every", "10"]  # fmt: skip
    undisturbed = subprocess.run(
        [PDELADDER, *args, "--run-dir", str(tmp_path / "undisturbed")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert undisturbed.returncode == 0, undisturbed.stdout + undisturbed.stderr
    run_dir = tmp_path / "killed"
    with nodes.cluster({"w1": 1, "w2": 1, "w3": 1}) as c:
        run = c.run("head", PDELADDER, *args, "--run-dir", str(run_dir), "--address", c.address,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        deadline = time.monotonic() + 300
        while registered_step(run_dir) < 10:
            assert run.poll() is None, run.communicate()[0]
            assert time.monotonic() < deadline, "no checkpoint registered in 300 s"
            time.sleep(0.2)
        lost = next(n for n in ("w1", "w2", "w3") if c.ran(n, "RayTrainWorker"))
        c.kill(lost)
        assert run.poll() is None and registered_step(run_dir) < 60  # lost mid-run
        out, _ = run.communicate(timeout=600)
        assert run.returncode == 0, out
        left = [n for n in ("w1", "w2", "w3") if n != lost]
        assert all(c.ran(n, "RayTrainWorker") for n in left), out  # the group started again
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(m["resumed_from"] >= 10 for m in metrics)  # from the registered checkpoint
    assert_same_model(tmp_path / "undisturbed", run_dir, 1e-6)


def test_training_submitted_as_a_ray_job_from_a_machine_outside_the_cluster(
    ray_local: None, tmp_path: Path
) -> None:
    """``ray job submit --address http://HEAD:8265 -- pdeladder train …`` (docs/trainer.md)
    from a machine of the cluster's network that runs no Ray node: the job's driver runs on the
    head, its two Ray Train workers on the two worker nodes, and the run folder (a path every
    node sees) ends with the model."""
    (tmp_path / "t.yaml").write_text(TRAINING)
    store, run_dir = str(tmp_path / "s.zarr"), tmp_path / "job"
    assert materialize(parse_curriculum(TRAINING), store_url=store).failed == 0
    with nodes.cluster({"w1": 1, "w2": 1}, dashboard=True) as c:
        c.machine("user")
        out = c.call("user", nodes.RAY, "job", "submit", "--address",
                     f"http://{c.head.address}:{nodes.DASHBOARD_PORT}", "--", PDELADDER, "train",
                     str(tmp_path / "t.yaml"), "--store", store, "--workers", "2", "--run-dir",
                     str(run_dir))  # fmt: skip
        assert "succeeded" in out, out
        assert c.ran("w1", "RayTrainWorker") and c.ran("w2", "RayTrainWorker"), out
        assert not c.ran("head", "RayTrainWorker")
    assert (run_dir / "stages" / "s0" / "model" / "model.safetensors").stat().st_size > 0


#: The data-campaign flow run on a node (a Prefect server of its own: ephemeral); prints the
#: run's end as one JSON line.
CAMPAIGN_FLOW = """
import json, sys
from pdeladder.flows.data_campaign import Campaign, data_campaign
yaml, url, address = sys.argv[1:]
state = data_campaign(Campaign(curriculum=yaml, store_url=url, workers=2, ray_address=address),
                      return_state=True)
groups = state.result()["groups"] if state.is_completed() else []
print("end:", json.dumps({"failed": state.is_failed(), "message": state.message,
                  "skipped": sum(g["skipped"] for g in groups)}))
"""


def flow_end(out: str) -> dict:
    """The end :data:`CAMPAIGN_FLOW` printed (Prefect's own lines may follow it)."""
    ends = [line for line in out.splitlines() if line.startswith("end: ")]
    assert ends, out
    return json.loads(ends[-1].removeprefix("end: "))


@pytest.mark.slow
def test_a_prefect_campaign_whose_cluster_disappears_fails_naming_it_and_a_rerun_resumes(
    ray_local: None, tmp_path: Path
) -> None:
    """A data-campaign flow run driven from a worker node; the head is killed mid-campaign (the
    whole cluster gone: the worker's raylet follows it). The flow run fails with a message that
    names the cluster's address; run again on a new cluster at that address, it solves only the
    samples not yet recorded, and the store equals one machine's bit for bit."""
    sizes = {"samples": 40, "resolution": 33}
    yaml, url = tmp_path / "c.yaml", str(tmp_path / "cluster.zarr")
    yaml.write_text(CAMPAIGN.format(**sizes))
    group = GROUP.format(**sizes)

    def solved() -> int:
        try:
            return int((open_store(url).group(group).status() == OK).sum())
        except Exception:  # not created yet
            return 0

    flow = [sys.executable, "-c", CAMPAIGN_FLOW, str(yaml), url]
    with nodes.cluster({"w1": 2}) as c:
        c.env.pop("PREFECT_API_URL", None)
        c.env["PREFECT_HOME"] = str(tmp_path / "prefect")
        log = tmp_path / "flow.log"  # a file: the flow's Prefect server may hold a pipe open
        with log.open("w") as sink:
            run = c.run("w1", *flow, c.address, stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while solved() < 2:
            assert run.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no samples solved in 300 s"
            time.sleep(0.2)
        c.kill("head")
        assert run.wait(timeout=300) == 0, log.read_text()
        out = log.read_text()
        end = flow_end(out)
        assert end["failed"] and f"Ray cluster at {c.address}" in end["message"], out
        recorded = solved()
        assert 2 <= recorded < sizes["samples"], out
    with nodes.cluster({"w1": 2}) as c:
        c.env.pop("PREFECT_API_URL", None)
        c.env["PREFECT_HOME"] = str(tmp_path / "prefect")
        out = c.call("w1", *flow, c.address)
        end = flow_end(out)
        assert not end["failed"] and end["skipped"] >= recorded, out
        verified(c, url)
    assert_equal_stores(url, reference(tmp_path, **sizes), sizes["resolution"])
