"""`pdeladder evaluate --out` resumes (issue 32, item 2): killed with SIGKILL part way, the
rerun of the same job scores only what was left and writes the report an undisturbed run
writes; another model's evaluation there is replaced, a folder that is not an evaluation is
refused."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pdeladder.dataset.store import open_store
from pdeladder.solvers.family import Sample, SolveStats
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.evaluate import LEDGER, evaluate_checkpoint

EXE = Path(sys.executable).with_name("pdeladder")

# `pdeladder evaluate` that SIGKILLs itself part way: with DIE_AT=plot as it is about to draw its
# second group's figure (the first group scored and recorded, the second scored but neither drawn
# nor recorded); with DIE_AT=predict once the domain ranks have predicted the first group (no
# group scored yet).
_DIES = textwrap.dedent(
    """
    from mpi4py import MPI  # noqa: F401

    import os, signal, sys
    from pdeladder.cli import main
    from pdeladder.trainer import evaluate

    plot, predict_store, calls = evaluate.plot_group, evaluate.predict_store, []

    def plot_then_die(*args, **kwargs):
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        calls.append(1)
        plot(*args, **kwargs)

    def predict_first_then_die(checkpoint, store, out, groups, **kwargs):
        predict_store(checkpoint, store, out, groups[:1], **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    if os.environ["DIE_AT"] == "plot":
        evaluate.plot_group = plot_then_die
    else:
        evaluate.predict_store = predict_first_then_die
    sys.argv = ["pdeladder", *sys.argv[1:]]
    main()
    """
)


def evaluate(*args: str | Path, die: str | None = None) -> subprocess.CompletedProcess:
    """Run ``pdeladder evaluate ARGS`` in its own process (dying part way at ``die``: plot or
    predict)."""
    command = [sys.executable, "-c", _DIES] if die else [str(EXE)]
    env = {**os.environ, "DIE_AT": die or ""}
    return subprocess.run(
        [*command, "evaluate", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.parametrize("domain_ranks", [1, 2])
def test_an_evaluation_killed_part_way_resumes_to_the_undisturbed_report(
    known_store, operator_checkpoint, tmp_path: Path, domain_ranks
):
    """The rerun keeps the first group's record and figure (not redrawn) and, on domain ranks,
    its predictions (not rewritten); its report.json, report.md, stdout and record equal an
    undisturbed run's byte for byte."""
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out, clean = tmp_path / "eval", tmp_path / "clean"
    args = [ckpt, "--store", known_store.url, "--domain-ranks", domain_ranks, "--json", "--out"]
    died = evaluate(*args, out, die="plot")
    assert died.returncode == -9, died.stderr[-3000:]
    first, second = open_store(known_store.url).groups()  # the order they are scored in
    record = json.loads((out / LEDGER).read_text())
    assert list(record["groups"]) == [first] and not (out / "report.json").exists()
    figure = out / (first.replace("/", "__") + ".png")
    chunks = list(out.glob("predictions.zarr/*/*/*/fields/c.*"))  # every group's, on ranks
    assert len(chunks) >= (2 if domain_ranks > 1 else 0)
    kept = {f: f.stat().st_mtime_ns for f in [figure, *chunks]}

    rerun = evaluate(*args, out)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {f: f.stat().st_mtime_ns for f in kept} == kept  # not redone
    undisturbed = evaluate(*args, clean)
    assert undisturbed.returncode == 0, undisturbed.stderr[-3000:]
    assert rerun.stdout == undisturbed.stdout
    for name in ("report.json", "report.md", LEDGER):
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name
    report = json.loads(rerun.stdout)
    assert list(report["groups"]) == [first, second]
    assert all(r["samples"] > 0 for r in report["groups"].values())


def test_another_models_evaluation_is_replaced_and_a_foreign_folder_refused(
    known_store, operator_checkpoint, tmp_path: Path
):
    """Into a previous evaluation of another model (or the same model retrained at the same
    place) the evaluation starts afresh: nothing of the other's record is kept. A non-empty
    folder that is not an evaluation is one line, exit 2, and left as it was."""
    url = known_store.url
    ckpt = operator_checkpoint(tmp_path / "model", url, known_store.paths)
    out, clean = tmp_path / "eval", tmp_path / "clean"
    assert evaluate(ckpt, "--store", url, "--out", out).returncode == 0
    ckpt = operator_checkpoint(tmp_path / "model", url, known_store.paths, persistence=True)
    again = evaluate(ckpt, "--store", url, "--json", "--out", out)
    assert again.returncode == 0, again.stderr[-3000:]
    fresh = evaluate(ckpt, "--store", url, "--json", "--out", clean)
    assert again.stdout == fresh.stdout
    assert (out / LEDGER).read_bytes() == (clean / LEDGER).read_bytes()

    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep")
    result = evaluate(ckpt, "--store", url, "--out", foreign)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "not a pdeladder output" in lines[0]
    assert [p.name for p in foreign.iterdir()] == ["mine.txt"]


def test_a_group_whose_samples_changed_since_is_scored_again(
    known_store, operator_checkpoint, tmp_path: Path
):
    """The record keeps each group's scored samples' checksums: a store regenerated at the same
    place with other fields is scored again, as a fresh evaluation scores it, not reported from
    the record."""
    url, paths = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, paths)
    before = evaluate_checkpoint(ckpt, url, tmp_path / "eval")
    store = open_store(url, "a")
    heat = store.group(paths[0])
    for i in range(known_store.samples):  # the same samples, their fields doubled
        fields = 2 * known_store.heat(i)
        sample = Sample(
            "heat", fields, heat.grid, get_family("heat").Params(), 100 + i, SolveStats()
        )
        heat.write(i, sample)
    again = evaluate_checkpoint(ckpt, url, tmp_path / "eval")
    fresh = evaluate_checkpoint(ckpt, url, tmp_path / "fresh")
    assert again["groups"] == fresh["groups"]
    assert again["groups"][paths[0]]["nrmse"] != before["groups"][paths[0]]["nrmse"]
    assert again["groups"][paths[1]] == before["groups"][paths[1]]  # unchanged: kept


def test_an_evaluation_killed_as_its_domain_ranks_predict_keeps_their_predictions(
    known_store, operator_checkpoint, tmp_path: Path
):
    """Killed after its 2 domain ranks predicted the first group, before any group was
    scored: the rerun predicts only the second group (the first's chunks not rewritten) and
    reports what an undisturbed run reports."""
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out, clean = tmp_path / "eval", tmp_path / "clean"
    args = [ckpt, "--store", known_store.url, "--domain-ranks", "2", "--json", "--out"]
    died = evaluate(*args, out, die="predict")
    assert died.returncode == -9, died.stderr[-3000:]
    first, second = open_store(known_store.url).groups()
    assert json.loads((out / LEDGER).read_text())["groups"] == {}
    predictions = open_store(str(out / "predictions.zarr"))
    assert predictions.groups() == [first]
    chunks = list(Path(out, "predictions.zarr", first, "fields").glob("c.*"))
    kept = {f: f.stat().st_mtime_ns for f in chunks}
    assert kept

    rerun = evaluate(*args, out)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {f: f.stat().st_mtime_ns for f in kept} == kept  # not predicted again
    undisturbed = evaluate(*args, clean)
    assert undisturbed.returncode == 0, undisturbed.stderr[-3000:]
    assert rerun.stdout == undisturbed.stdout
    for name in ("report.json", "report.md", LEDGER):
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name
    assert open_store(str(out / "predictions.zarr")).groups() == [first, second]
