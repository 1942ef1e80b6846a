"""`pdeladder predict` writes a model's rollouts into a store of the input's format: fields equal
the model applied to the inputs, everything else is the source's, and the store reads back
through xarray, `store verify`, `store plot` and `evaluate`."""

import json
import os
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.dataset.catalog import split
from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.format import OK
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import open_store
from pdeladder.dataset.verify import verify
from pdeladder.solvers.family import Sample, SolveStats
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.evaluate import evaluate_checkpoint
from pdeladder.trainer.inference import predict
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.predict import predict_store
from pdeladder.trainer.processor import DataProcessor

runner = CliRunner()
EXE = os.path.join(os.path.dirname(sys.executable), "pdeladder")


def trapezoid(n: int) -> np.ndarray:
    w = np.ones(n)
    w[0] = w[-1] = 0.5
    return w


def model_output(ckpt: Path, group, index: int) -> np.ndarray:
    """The model applied to sample ``index``'s inputs, ``(T, C_f, X, Y, Z)`` physical."""
    model, meta = load_model(ckpt)
    layout = SlotLayout.from_json(meta["layout"])
    fields = group.read(index)[None]
    batch = make_batch(
        layout, group.family, group.grid, fields, group.params()[[index]], solved=True
    )
    pred = predict(model.eval(), DataProcessor(layout), batch)  # (1, C_slots, T, X, Y, Z)
    slots = layout.slot_indices(get_family(group.family), group.grid.dim)
    return pred[0, slots].movedim(0, 1).numpy()


@pytest.fixture
def predicted(known_store, operator_checkpoint, tmp_path: Path) -> tuple[Path, str]:
    """(checkpoint, predicted store URL) written by `pdeladder predict`."""
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out = str(tmp_path / "pred.zarr")
    args = ["predict", str(ckpt), "--store", known_store.url, "--out", out, "--batch-size", "3"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, "".join(traceback.format_exception(result.exception))
    # the progress bar (with its estimate) on stderr; stdout holds the result only
    assert result.stdout.split() == f"wrote 20 predicted samples in 2 group(s) to {out}".split()
    assert all(f"predicting {p}" in result.stderr for p in known_store.paths)
    assert "left" in result.stderr
    return ckpt, out


def test_predicted_store_holds_the_model_applied_to_the_inputs(known_store, predicted):
    ckpt, out = predicted
    source, pred = open_store(known_store.url), open_store(out)
    assert pred.groups() == source.groups()
    for path in source.groups():
        s, p = source.group(path), pred.group(path)
        assert p.attrs["prediction"]["checkpoint"] == str(ckpt.absolute())
        assert p.attrs["prediction"]["source_group"] == path
        assert {
            k: v for k, v in p.attrs.items() if k not in ("software", "normalization", "prediction")
        } == {k: v for k, v in s.attrs.items() if k not in ("software", "normalization")}
        np.testing.assert_array_equal(p.params(), s.params())
        np.testing.assert_array_equal(p.column("seed"), s.column("seed"))
        assert (p.status() == 1).all()
        inputs = [c["role"] == "input" for c in s.attrs["channels"]]
        for i in range(s.n_samples):
            got, truth, expected = p.read(i), s.read(i), model_output(ckpt, s, i)
            outputs = ~np.array(inputs)
            scale = np.abs(expected).max()
            np.testing.assert_allclose(
                got[:, outputs], expected[:, outputs], rtol=0, atol=1e-6 * scale
            )
            np.testing.assert_array_equal(got[:, inputs], truth[:, inputs])  # given, copied
            if s.grid.snapshots > 1:
                np.testing.assert_array_equal(got[0], truth[0])  # the initial condition
            assert not np.array_equal(
                got[:, outputs], truth[:, outputs]
            )  # a prediction, not a copy
            info = p.info(i)
            assert info["provenance"]["source_index"] == i
            assert info["provenance"]["checkpoint"] == str(ckpt.absolute())


def test_predicted_store_verifies_plots_and_reads_in_xarray(known_store, predicted, tmp_path):
    _, out = predicted
    verify(out)
    result = runner.invoke(app, ["store", "verify", out, "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["ok"], result.output
    heat = known_store.paths[0]
    png = tmp_path / "heat.png"
    result = runner.invoke(
        app, ["store", "plot", out, "--group", heat, "--sample", "2", "--out", str(png)]
    )
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 0
    ds = xr.open_zarr(out, group=heat, consolidated=False)
    np.testing.assert_array_equal(ds["fields"][4].values, open_store(out).group(heat).read(4))


def test_evaluate_on_the_predicted_store_scores_the_model_against_itself(known_store, predicted):
    ckpt, out = predicted
    own = evaluate_checkpoint(ckpt, out)
    assert set(own["groups"]) == set(known_store.paths)
    for r in own["groups"].values():
        assert r["kind"] == "held_out"
        assert r["nrmse"] < 1e-6  # the model reproduces its own rollouts from the same inputs
    # Against the truth, evaluate scores what predict wrote: the predicted store's error on the
    # held-out samples, computed here with the trapezoidal relative L2 by hand.
    truth = evaluate_checkpoint(ckpt, known_store.url)
    source, pred = open_store(known_store.url), open_store(out)
    _, held_out = split(np.arange(known_store.samples), 0.1)
    for path, r in truth["groups"].items():
        outputs = [c["role"] == "output" for c in source.group(path).attrs["channels"]]
        errors = []
        for i in held_out:
            u, p = source.group(path).read(i)[:, outputs], pred.group(path).read(i)[:, outputs]
            w = (
                np.ones(u.shape[0])[:, None, None, None, None]
                * trapezoid(u.shape[2])[:, None, None]
            )
            if u.shape[0] > 1:
                w = w * trapezoid(u.shape[0])[:, None, None, None, None]
            errors.append(np.sqrt((w * (p - u) ** 2).sum() / (w * u**2).sum()))
        assert r["nrmse"] == pytest.approx(np.mean(errors), rel=1e-4)


def test_groups_option_predicts_only_those(known_store, operator_checkpoint, tmp_path: Path):
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out = str(tmp_path / "pred.zarr")
    darcy = known_store.paths[1]
    args = ["predict", str(ckpt), "--store", known_store.url, "--out", out, "--groups", darcy]
    assert runner.invoke(app, args).exit_code == 0
    assert open_store(out).groups() == [darcy]


@pytest.mark.parametrize("case", ["unknown group", "missing checkpoint", "non-empty out"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    case, known_store, operator_checkpoint, tmp_path: Path
):
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out = tmp_path / "pred.zarr"
    args = ["predict", str(ckpt), "--store", known_store.url, "--out", str(out)]
    if case == "unknown group":
        args += ["--groups", "s/heat/1d_n99_t5"]
    elif case == "missing checkpoint":
        args[1] = str(tmp_path / "nowhere")
    else:
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    result = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip()
    assert "\n" not in message and message.startswith("error:") and result.stdout == ""
    if case == "non-empty out":
        assert "not a pdeladder output" in message
        forced = subprocess.run([EXE, *args, "--force"], capture_output=True, text=True)
        assert forced.returncode == 2 and "not a pdeladder output" in forced.stderr
        assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    else:
        assert not out.exists()


@pytest.mark.parametrize("where", ["store", "parent", "inside", "checkpoint"])
def test_an_out_over_an_input_is_refused_and_the_input_kept(
    where, known_store, operator_checkpoint, tmp_path: Path
):
    """The issue's `predict CK --store parent/s.zarr --out parent --force` and its kin."""
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    before = sorted(tmp_path.rglob("*"))
    out = {
        "store": known_store.url,
        "parent": str(tmp_path),
        "inside": f"{known_store.url}/pred.zarr",
        "checkpoint": str(ckpt),
    }[where]
    args = ["predict", str(ckpt), "--store", known_store.url, "--out", out, "--force"]
    result = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600)
    message = result.stderr.strip()
    assert result.returncode == 2 and "choose an --out outside it" in message, message
    assert "\n" not in message and sorted(tmp_path.rglob("*")) == before
    verify(known_store.url)


def test_force_replaces_a_previous_prediction(known_store, operator_checkpoint, tmp_path: Path):
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out = tmp_path / "pred.zarr"
    args = ["predict", str(ckpt), "--store", known_store.url, "--out", str(out)]
    args += ["--groups", known_store.paths[0]]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, args)  # without --force: completes it, nothing is left to do
    assert again.exit_code == 0 and "wrote 0 predicted samples" in again.output
    other = operator_checkpoint(tmp_path / "other", known_store.url, known_store.paths[:1])
    result = subprocess.run([EXE, *args[:1], str(other), *args[2:]], capture_output=True, text=True)
    assert result.returncode == 2 and "exists with another configuration" in result.stderr
    (out / "stale.txt").write_text("from before")
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0
    assert not (out / "stale.txt").exists()
    verify(str(out))


# `pdeladder predict` that dies after two batches, as a SIGKILL leaves it: no cleanup at all.
_DIES = textwrap.dedent(
    """
    from mpi4py import MPI  # noqa: F401

    import os, sys
    from pdeladder.cli import main
    from pdeladder.trainer import predict

    into, calls = predict.predict_into, []

    def into_then_die(*args, **kwargs):
        if len(calls) == 2:
            os._exit(9)
        calls.append(1)
        into(*args, **kwargs)

    predict.predict_into = into_then_die
    sys.argv = ["pdeladder", *sys.argv[1:]]
    main()
    """
)


def test_a_prediction_killed_half_way_resumes_to_the_undisturbed_bytes(
    known_store, operator_checkpoint, tmp_path: Path
):
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out, clean = str(tmp_path / "pred.zarr"), str(tmp_path / "clean.zarr")
    args = ["predict", str(ckpt), "--store", known_store.url, "--batch-size", "2", "--out"]
    died = subprocess.run([sys.executable, "-c", _DIES, *args, out], capture_output=True)
    assert died.returncode == 9
    (first, *_) = sorted(known_store.paths)
    assert (open_store(out).group(first).status() == OK).sum() == 4  # two batches landed
    landed = {f: f.stat().st_mtime_ns for f in Path(out, first, "fields").glob("c.0.*")}
    rerun = subprocess.run([EXE, *args, out], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"wrote {2 * known_store.samples - 4} predicted samples" in rerun.stdout
    assert landed and {f: f.stat().st_mtime_ns for f in landed} == landed  # not redone
    assert runner.invoke(app, [*args, clean]).exit_code == 0
    verify(out)
    resumed, undisturbed = open_store(out), open_store(clean)
    assert resumed.groups() == undisturbed.groups() == sorted(known_store.paths)
    for path in resumed.groups():
        a, b = resumed.group(path), undisturbed.group(path)
        assert list(a.status()) == list(b.status()) == [OK] * known_store.samples
        for i in range(known_store.samples):
            assert a.read(i).tobytes() == b.read(i).tobytes()
            assert (a.info(i)["seed"], a.info(i)["params"]) == (
                b.info(i)["seed"],
                b.info(i)["params"],
            )


def test_an_appendable_group_is_predicted_at_its_current_size(
    known_store, operator_checkpoint, tmp_path: Path
):
    url, out = str(tmp_path / "growing.zarr"), str(tmp_path / "pred.zarr")
    heat = get_family("heat")
    group = open_store(url, "a").require_group("s", heat, known_store.heat_grid)
    for i in range(3):
        grid = known_store.heat_grid
        group.append(Sample("heat", known_store.heat(i), grid, heat.Params(), i, SolveStats()))
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    assert predict_store(ckpt, url, out) == {group.path: 3}
    verify(out)
    assert open_store(out).group(group.path).n_samples == 3


def test_two_domain_ranks_write_the_one_worker_prediction_slab_by_slab(
    known_store, predicted, tmp_path
):
    """Two processes on gloo, each reading, predicting and writing its x slab (x chunked at the
    slab boundary, so no chunk has two writers), give the one-process prediction."""
    ckpt, whole = predicted
    out = str(tmp_path / "pred2.zarr")
    args = ["predict", str(ckpt), "--store", known_store.url, "--out", out, "--domain-ranks", "2"]
    result = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    verify(out)  # raises on any problem
    for path in known_store.paths:
        one, two = open_store(whole).group(path), open_store(out).group(path)
        assert two.chunks["fields"].chunks[2] == 5  # 9 x points: slabs [0, 5) and [5, 9)
        assert json.loads(two.column("provenance")[0])["domain_ranks"] == 2
        for i in range(known_store.samples):
            np.testing.assert_allclose(two.read(i), one.read(i), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_predict_leaves_no_rank_writing(
    known_store, operator_checkpoint, tmp_path, running
):
    """SIGKILL of ``pdeladder predict --domain-ranks 2`` as its ranks start ends them too: none
    goes on to commit predictions into the store beside a rerun's."""
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out = str(tmp_path / "pred.zarr")
    args = ["predict", str(ckpt), "--store", known_store.url, "--out", out, "--domain-ranks", "2"]
    cli = subprocess.Popen([EXE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    word, deadline = "-m pdeladder.trainer.predict", time.monotonic() + 120
    while len(ranks := running(word, parent=cli.pid)) < 2:
        assert cli.poll() is None and time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.05)
    cli.kill()
    cli.wait()
    deadline = time.monotonic() + 30
    while set(ranks) & set(running(word)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(ranks) & set(running(word))
    store = open_store(out) if os.path.exists(out) else None
    for path in store.groups() if store else []:
        assert OK not in store.group(path).status()


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_resumed_prediction_predicts_again_the_samples_changed_since(
    known_store, operator_checkpoint, tmp_path: Path, ranks: int
):
    """A store regenerated between a kill and the rerun: each prediction records its source
    sample's checksum, and the rerun predicts again exactly the samples whose checksum changed
    (on one process and on x slabs), equal to a fresh prediction of the store as it is now."""
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out, fresh = str(tmp_path / "pred.zarr"), str(tmp_path / "fresh.zarr")
    predict_store(ckpt, known_store.url, out, domain_ranks=ranks)
    heat = get_family("heat")
    path = next(p for p in known_store.paths if "/heat/" in p)
    source = open_store(known_store.url, "a").group(path)
    changed = Sample("heat", 2 * known_store.heat(3), known_store.heat_grid, heat.Params(), 103,
                     SolveStats())  # fmt: skip
    source.write(3, changed)
    kept = open_store(out).group(path).read(0).tobytes()
    assert predict_store(ckpt, known_store.url, out, domain_ranks=ranks) == {
        p: (1 if p == path else 0) for p in known_store.paths
    }
    predict_store(ckpt, known_store.url, fresh, domain_ranks=ranks)
    again, now = open_store(out).group(path), open_store(fresh).group(path)
    assert again.read(0).tobytes() == kept
    for i in range(known_store.samples):
        assert again.read(i).tobytes() == now.read(i).tobytes()
