"""Curriculum files: every example loads; bad input is an error naming the field and the line."""

import json
from pathlib import Path

import pytest
import yaml

from pdeladder.curriculum import load_curriculum, parse_curriculum
from pdeladder.curriculum.families import UNAVAILABLE
from pdeladder.curriculum.plan import plan_stage
from pdeladder.curriculum.spec import HELD_OUT
from pdeladder.dataset.format import DEFAULT_COMPRESSION
from pdeladder.errors import CurriculumError, UnknownNameError

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))
#: The curricula the benchmarks reproduce their results with (benchmarks/RESULTS.md).
BENCHMARKS = sorted((Path(__file__).parents[2] / "benchmarks").glob("*.yaml"))

GOOD = """\
name: tiny
seed: 7
stages:
  - name: s0
    families:
      - family: heat
        dims: [1, 2]
        resolutions: [9]
        samples: 4
        params:
          diffusivity: [0.01, 0.05]
          ic_length_scale: 0.2
    training:
      steps: 10
      self_improvement: {steps: 5, samples: 8}
"""


def _without_unavailable(data: dict) -> dict:
    """The curriculum minus the families whose solver module is not importable yet."""
    for stage in data["stages"]:
        stage["families"] = [f for f in stage["families"] if f["family"] not in UNAVAILABLE]
    data["stages"] = [s for s in data["stages"] if s["families"]]
    return data


@pytest.mark.parametrize("path", EXAMPLES + BENCHMARKS, ids=[p.name for p in EXAMPLES + BENCHMARKS])
def test_every_example_loads(path: Path) -> None:
    if UNAVAILABLE:
        data = _without_unavailable(yaml.safe_load(path.read_text()))
        spec = parse_curriculum(yaml.safe_dump(data), source=str(path))
    else:
        spec = load_curriculum(path)
    assert spec.stages and all(s.groups() for s in spec.stages)


def test_examples_exist() -> None:
    assert {"quickstart.yaml", "full.yaml"} <= {p.name for p in EXAMPLES}


def test_quickstart_rises_in_resolution() -> None:
    spec = yaml.safe_load((Path(__file__).parents[2] / "examples/quickstart.yaml").read_text())
    assert len(spec["stages"]) >= 3
    families = {f["family"] for s in spec["stages"] for f in s["families"]}
    assert len(families) >= 3
    top = [  # grid points of the finest sample per stage
        max(r ** max(f["dims"]) for f in s["families"] for r in f["resolutions"])
        for s in spec["stages"]
    ]
    assert top == sorted(top) and top[-1] > top[0]


def test_good_curriculum_parses_ranges_and_defaults() -> None:
    spec = parse_curriculum(GOOD)
    entry = spec.stages[0].families[0]
    rng = entry.params.resolved()
    assert (rng["diffusivity"].low, rng["diffusivity"].high) == (0.01, 0.05)
    assert rng["ic_length_scale"].fixed and rng["ic_length_scale"].low == 0.2
    assert [g.dim for g in entry.grids()] == [1, 2]
    assert entry.grids()[0].snapshots == 11  # time-dependent default
    assert spec.stages[0].training.self_improvement.samples == 8
    assert spec.compression == DEFAULT_COMPRESSION
    assert spec.held_out == spec.stages[0].training.held_out == HELD_OUT == 0.1
    share = parse_curriculum(GOOD.replace("steps: 10", "steps: 10\n      held_out: 0.25"))
    assert share.held_out == 0.25
    zstd = parse_curriculum(GOOD.replace("seed: 7", "seed: 7\ncompression: blosc-zstd"))
    assert {g.compression for g in plan_stage(zstd, zstd.stages[0]).groups} == {"blosc-zstd"}


@pytest.mark.parametrize(
    ("old", "new", "line", "field", "words"),
    [
        (
            "diffusivity: [",
            "difusivity: [",
            11,
            "stages[0].families[0].params.difusivity",
            "unknown field",
        ),
        (
            "diffusivity: [0.01, 0.05]",
            "diffusivity: [0.01, 5]",
            11,
            "params.diffusivity",
            "admissible range",
        ),
        (
            "family: heat",
            "family: heet",
            6,
            "stages[0].families[0]",
            "available: advection_diffusion,",
        ),
        ("samples: 4", "samples: 0", 9, "families[0].samples", "greater than or equal to 1"),
        ("dims: [1, 2]", "dims: [1, 4]", 7, "families[0].dims[1]", "less than or equal to 3"),
        ("steps: 10", "steps: 10\n      epochs: 3", 15, "training.epochs", "unknown field"),
        ("seed: 7", "seed: seven", 2, "seed", "valid integer"),
        ("seed: 7", "seed: 7\ncompression: lz5", 3, "compression", "available: none, blosc-lz4"),
        ("steps: 10", "steps: 10\n      held_out: 1", 15, "training.held_out", "less than 1"),
        ("steps: 10", "steps: 10\n      held_out: 0", 15, "training.held_out", "greater than 0"),
        ("steps: 10", "steps: 10\n      held_out: -0.1", 15, "training.held_out", "greater than"),
    ],
)
def test_errors_name_field_and_line(old: str, new: str, line: int, field: str, words: str) -> None:
    with pytest.raises(CurriculumError) as err:
        parse_curriculum(GOOD.replace(old, new), source="c.yaml")
    msg = str(err.value)
    assert msg.startswith(f"c.yaml:{line}: ") and field in msg and words in msg, msg
    assert "\n" not in msg


def test_snapshots_checked_against_family() -> None:
    with pytest.raises(
        CurriculumError, match=r"c.yaml:6: .*time-dependent: snapshots must be >= 2"
    ):
        parse_curriculum(GOOD.replace("samples: 4", "samples: 4\n        snapshots: 1"), "c.yaml")


def test_one_held_out_share_in_every_stage() -> None:
    """A sample held out of one stage stays out of the next: the stages' shares agree."""
    first = GOOD.replace("steps: 10", "steps: 10\n      held_out: 0.25")
    assert parse_curriculum(first + later(first)).held_out == 0.25
    with pytest.raises(CurriculumError, match=r"differs between stages \(s0: 0.25, s1: 0.1\)"):
        parse_curriculum(first + later(GOOD))


def later(curriculum: str) -> str:
    """The stage of ``curriculum`` as a second stage, ``s1``."""
    return curriculum.split("stages:\n")[1].replace("name: s0", "name: s1")


def test_duplicate_groups_and_stages_rejected() -> None:
    twice = GOOD.replace("dims: [1, 2]", "dims: [2, 2]")
    with pytest.raises(CurriculumError, match="listed twice"):
        parse_curriculum(twice)
    stage = GOOD[GOOD.index("  - name: s0") :]
    with pytest.raises(CurriculumError, match="repeated: s0"):
        parse_curriculum(GOOD + stage)


def test_yaml_is_parsed_never_evaluated() -> None:
    with pytest.raises(CurriculumError, match=r"c.yaml:2: invalid YAML"):
        parse_curriculum(
            GOOD.replace("seed: 7", "seed: !!python/object/apply:os.getpid []"), "c.yaml"
        )


def test_unknown_stage_lists_available() -> None:
    with pytest.raises(UnknownNameError, match="no stage 'nope'; available: s0"):
        parse_curriculum(GOOD).stage("nope")


def test_missing_file_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(CurriculumError.__mro__[1], match="cannot read curriculum"):
        load_curriculum(tmp_path / "absent.yaml")


def test_cli_schema_and_validate(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pdeladder.cli import app

    out = CliRunner().invoke(app, ["curriculum", "schema"])
    schema = json.loads(out.stdout)
    assert "stages" in schema["properties"] and "HeatEntry" in schema["$defs"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("diffusivity: [", "difusivity: ["))
    res = CliRunner().invoke(app, ["curriculum", "validate", str(bad)])
    assert isinstance(res.exception, CurriculumError)  # `main` prints it and exits 2
    assert f"{bad}:11: stages[0].families[0].params.difusivity: unknown field" in str(res.exception)


def test_replay_names_earlier_stages_only() -> None:
    second = GOOD[GOOD.index("  - name: s0") :].replace("name: s0", "name: s1")
    ok = parse_curriculum(GOOD + second.replace("steps: 10\n", "steps: 10\n      replay: [s0]\n"))
    assert ok.stage("s1").training.replay == ["s0"] and ok.stage("s0").training.replay == []
    for bad, words in (("s1", "replay s1: not an earlier stage; earlier: s0"), ("sx", "sx")):
        text = GOOD + second.replace("steps: 10\n", f"steps: 10\n      replay: [{bad}]\n")
        with pytest.raises(CurriculumError, match=words):
            parse_curriculum(text)
