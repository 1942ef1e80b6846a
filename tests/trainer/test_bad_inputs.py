"""Every bad input to `pdeladder predict`, `evaluate`, `train` and `scale` is one line on stderr,
exit code 2 and nothing written, checked before the work starts (issue 32): the installed
console script run on real stores and checkpoints damaged as a user's might be."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError
from pdeladder.slabs import slab_chunk, slabs
from pdeladder.solvers.family import Sample, SolveStats
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.models.checkpoint import CONFIG_FILE, WEIGHTS_FILE, check_device, load_model
from pdeladder.trainer.predict import slab_tiling

from .conftest import KNOWN_HEAT, KNOWN_SAMPLES, known_darcy, known_heat, save_operator

TINY = """
name: tiny
seed: 7
stages:
  - name: s1
    families:
      - family: heat
        dims: [1]
        resolutions: [9]
        samples: 4
        snapshots: 3
    training: {steps: 2, batch_size: 2}
"""


def damaged(folder: Path, name: str, how) -> Path:
    """A copy of the checkpoint ``folder`` as ``name``, ``how(model.json text, weights bytes)``
    giving the damaged pair."""
    copy = folder.parent / name
    copy.mkdir()
    text, weights = how((folder / CONFIG_FILE).read_text(), (folder / WEIGHTS_FILE).read_bytes())
    (copy / CONFIG_FILE).write_text(text)
    (copy / WEIGHTS_FILE).write_bytes(weights)
    return copy


def edited(edit):
    """A ``how`` for :func:`damaged` that edits ``model.json``'s ``args``."""

    def how(text: str, weights: bytes) -> tuple[str, bytes]:
        doc = json.loads(text)
        edit(doc["args"])
        return json.dumps(doc), weights

    return how


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``known.zarr`` (1D heat and Darcy groups, X = 9), ``plane.zarr`` (a 2D
    heat group), the model ``model`` trained on the first, damaged copies of it (``ck_*``), a
    file ``afile`` and the curriculum ``tiny.yaml``; the commands run here."""
    root = tmp_path_factory.mktemp("bad_inputs")
    store, paths = open_store(str(root / "known.zarr"), "a"), []
    for name, grid, fields in (
        ("heat", KNOWN_HEAT, known_heat),
        ("darcy", Grid(1, 9, 1, 0.0), known_darcy),
    ):
        fam = get_family(name)
        group = store.require_group("s", fam, grid, n_samples=KNOWN_SAMPLES)
        for i in range(KNOWN_SAMPLES):
            group.write(i, Sample(name, fields(i), grid, fam.Params(), 100 + i, SolveStats()))
        group.update_normalisation()
        paths.append(group.path)
    heat, plane = get_family("heat"), Grid(2, 9, 3, 0.5)
    group = open_store(str(root / "plane.zarr"), "a").require_group("s", heat, plane, n_samples=2)
    for i in range(2):
        fields = np.random.default_rng(i).normal(size=(3, 1, 9, 9, 1)).astype(np.float32)
        group.write(i, Sample("heat", fields, plane, heat.Params(), i, SolveStats()))
    group.update_normalisation()
    model = save_operator(root / "model", str(root / "known.zarr"), paths)
    damaged(model, "ck_truncated", lambda t, w: (t[:100], w))
    damaged(model, "ck_extra_key", edited(lambda a: a.update(bogus=1)))
    damaged(model, "ck_missing_key", edited(lambda a: a.pop("width")))
    damaged(model, "ck_width", edited(lambda a: a.update(width=16)))
    damaged(model, "ck_not_json", lambda t, w: ("[1, 2]", w))
    damaged(model, "ck_random_weights", lambda t, w: (t, os.urandom(len(w))))
    damaged(model, "ck_truncated_weights", lambda t, w: (t, w[: len(w) // 2]))
    (root / "afile").write_text("a file, not a folder\n")
    (root / "tiny.yaml").write_text(TINY)
    return root


CHECKPOINTS = [
    "ck_truncated",
    "ck_extra_key",
    "ck_missing_key",
    "ck_width",
    "ck_not_json",
    "ck_random_weights",
    "ck_truncated_weights",
]
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
STORE = ("--store", "known.zarr")

PREDICT = [
    *[pytest.param((ck, *STORE), id=ck) for ck in ("ck_truncated", "ck_random_weights")],
    pytest.param(("model", *STORE, "--batch-size", "0"), id="batch-size-0"),
    pytest.param(("model", *STORE, "--batch-size", "x"), id="batch-size-not-int"),
    pytest.param(("model", *STORE, "--domain-ranks", "0"), id="domain-ranks-0"),
    pytest.param(("model", *STORE, "--domain-ranks", "100000"), id="domain-ranks-huge"),
    pytest.param(("model", *STORE, "--device", "bogus"), id="device-bogus"),
    pytest.param(("model", *STORE, "--device", "cuda"), id="device-cuda", marks=NO_GPU),
    pytest.param(("model", "--store", "plane.zarr"), id="1d-model-2d-store"),
    pytest.param(("model", *STORE, "--groups", "s/heat/nope"), id="unknown-group"),
]


@pytest.mark.parametrize("args", PREDICT)
def test_predict_refuses_in_one_line(refused, root: Path, args) -> None:
    refused("predict", *args, "--out", "pred.zarr", out="pred.zarr", cwd=root)


EVALUATE = [
    pytest.param(("ck_extra_key", *STORE), id="ck_extra_key"),
    pytest.param(("model", *STORE, "--metrics", "bogus"), id="metrics-bogus"),
    pytest.param(("model", *STORE, "--domain-ranks", "0"), id="domain-ranks-0"),
    pytest.param(("model", "--store", "plane.zarr"), id="1d-model-2d-store"),
]


@pytest.mark.parametrize("args", EVALUATE)
def test_evaluate_refuses_in_one_line(refused, root: Path, args) -> None:
    refused("evaluate", *args, out="report", cwd=root)


def test_evaluate_refuses_an_unwritable_out_before_evaluating(refused, root: Path) -> None:
    line = refused("evaluate", "model", *STORE, "--out", "afile/report", cwd=root)
    assert "afile" in line and not (root / "afile" / "report").exists()


TRAIN = [
    pytest.param(("--checkpoint-every", "0"), "checkpoint-every", id="checkpoint-every-0"),
    pytest.param(("--workers", "0"), "workers", id="workers-0"),
    pytest.param(("--domain-ranks", "²"), "domain-ranks", id="domain-ranks-superscript"),
    pytest.param(("--parallel", "bogus"), "parallel", id="parallel-bogus"),
    pytest.param((), "no store", id="no-store"),
]


@pytest.mark.parametrize(("args", "says"), TRAIN)
def test_train_refuses_in_one_line_before_ray(refused, root: Path, args, says: str) -> None:
    """Each refusal names what it refuses (``tiny.yaml`` names no store: with ``--store`` the
    option's own check must answer first)."""
    store = () if says == "no store" else ("--store", "known.zarr")
    line = refused("train", "tiny.yaml", *store, "--run-dir", "run", *args, out="run", cwd=root)
    assert says in line


RUN_DIRS = [
    pytest.param("known.zarr", "is the input known.zarr", id="the-store"),
    pytest.param("known.zarr/run", "lies inside the input known.zarr", id="inside-the-store"),
    pytest.param("tiny.yaml", "is the input tiny.yaml", id="the-curriculum"),
    pytest.param("afile/run", "lies under the file", id="under-a-file"),
]


@pytest.mark.parametrize(("run_dir", "says"), RUN_DIRS)
def test_train_never_writes_into_its_store_or_over_its_curriculum(
    refused, root: Path, run_dir: str, says: str
) -> None:
    """A --run-dir that is or lies inside the store, or is the curriculum file, is one line
    before Ray starts, and the store and file are left as they were (a run folder that holds
    the store is let be: train only adds its own files there)."""
    before = sorted(p.name for p in (root / "known.zarr").iterdir())
    text = (root / "tiny.yaml").read_text()
    line = refused("train", "tiny.yaml", "--store", "known.zarr", "--run-dir", run_dir, cwd=root)
    assert says in line
    assert sorted(p.name for p in (root / "known.zarr").iterdir()) == before
    assert (root / "tiny.yaml").read_text() == text


SCALE = [
    pytest.param(("10,4,9,8,8", "--domain-ranks", "0"), id="domain-ranks-0"),
    pytest.param(("10,4,9,8,8", "--ranks", "0"), id="ranks-0"),
    pytest.param(("10,4,3²,8,8",), id="axis-superscript"),
    pytest.param(("10,4,9,8,8", "--modes", "8,8,²,8"), id="modes-superscript"),
    pytest.param(("10,4,9,8,8", "--in-channels", "-3"), id="in-channels-negative"),
    pytest.param(("10,4,9,8,8", "--out-channels", "-3"), id="out-channels-negative"),
    pytest.param(("10,4,9,8,8", "--layers", "100000"), id="layers-huge"),
    pytest.param(("10,4,9,8,8", "--width", "10000000"), id="width-huge"),
    pytest.param(("10,4,99999999999,8,8", "--fit"), id="fit-huge-axis"),
    pytest.param(("10,4,9,8,8", "--batch", "x"), id="batch-not-int"),
]


@pytest.mark.parametrize("args", SCALE)
def test_scale_refuses_in_one_line(refused, args) -> None:
    refused("scale", *args)


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_damaged_checkpoint_is_one_user_error(root: Path, name: str) -> None:
    """What `predict` and `evaluate` print for each damage (in process: the CLI cases above)."""
    with pytest.raises(UserInputError, match=name) as refused:
        load_model(root / name)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("device", ["bogus", "cuda:99", "xla"])
def test_a_device_that_is_not_here_is_one_user_error(device: str) -> None:
    with pytest.raises(UserInputError, match="--device"):
        check_device(device)


@pytest.mark.parametrize("x", range(3, 40))
def test_the_slab_chunk_cuts_x_into_as_many_slabs_as_ranks(x: int) -> None:
    """predict's x chunk for K writers gives K slabs for every K up to X (X = 9, K = 4 gave 3
    chunks of 3: `4 slabs of 3 chunks`)."""
    for k in range(1, min(x, 8) + 1):
        assert len(slabs(x, slab_chunk(x, k), k)) == k
        slab_tiling(Grid(1, x, 3, 0.5), k, 0.25)
