"""Every ``pdeladder`` command that README.md and docs/*.md show exists as shown.

The commands are read from the documents' code blocks (fenced blocks, and inline code that starts
with ``pdeladder``): each one's subcommand path must exist and each ``--option`` it shows must be
one of that command's, and its ``--help`` must run. A few cheap ones run for real, their
placeholders filled in, on a store of one tiny sample solved by the documented ``solve``.
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pdeladder.cli import app

ROOT = Path(__file__).parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`(pdeladder [^`]+)`")
#: A command starts a line (after a shell prompt) or follows `&&` / `;`.
START = re.compile(r"(?:^\s*(?:\$\s+)?|&&\s*|;\s*)(pdeladder(?: .*)?)$")
LONG_OPTION = re.compile(r"--[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class Shown:
    """A command as a document shows it: where, and its text (continuation lines joined, the
    description column of a command list cut off)."""

    where: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def fenced_commands(document: Path) -> list[Shown]:
    out: list[Shown] = []
    text = document.read_text(encoding="utf-8")
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).splitlines()
        k = 0
        while k < len(lines):
            line, where = lines[k], f"{document.name}:{first + k}"
            while line.endswith("\\") and k + 1 < len(lines):  # a shell continuation
                k += 1
                line = line[:-1] + " " + lines[k].strip()
            k += 1
            found = START.search(line.split("#", 1)[0].rstrip())
            if not found:
                continue
            command = re.split(r"\s{3,}", found.group(1))[0]  # a list's description column
            # A command list's continuation lines: indented options under the command.
            while k < len(lines) and re.match(r"\s+\[?--", lines[k]):
                command += " " + re.split(r"\s{3,}", lines[k].strip())[0]
                k += 1
            out.append(Shown(where, command.strip()))
    return out


def inline_commands(document: Path) -> list[Shown]:
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), document.read_text("utf-8"))
    return [
        Shown(f"{document.name}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1).strip())
        for m in INLINE.finditer(text)
    ]


def shown_commands() -> list[Shown]:
    return [c for d in DOCUMENTS for c in (*fenced_commands(d), *inline_commands(d))]


def is_group(command: Any) -> bool:
    """A command with subcommands (typer's own click types: ``isinstance`` on click's fails)."""
    return hasattr(command, "commands")


def resolve(shown: Shown) -> list[tuple[list[str], Any]]:
    """The subcommand paths the text names (``inspect|verify|plot`` names three) and their
    commands; an unknown subcommand or option fails the test, naming the document's line."""
    tokens = shown.text.split()
    assert tokens[0] == "pdeladder", shown
    paths: list[tuple[list[str], Any]] = [([], typer.main.get_command(app))]
    i = 1
    while is_group(paths[0][1]) and i < len(tokens):
        if tokens[i].startswith("-"):
            break
        grown = []
        for path, group in paths:
            for name in tokens[i].split("|"):
                sub = group.commands.get(name)
                assert sub is not None, f"{shown}: no subcommand {' '.join([*path, name])!r}"
                grown.append(([*path, name], sub))
        paths, i = grown, i + 1
    rest = " ".join(tokens[i:])
    for path, command in paths:
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        for option in LONG_OPTION.findall(rest):
            assert option in known, f"{shown}: `pdeladder {' '.join(path)}` has no {option}"
    return paths


SHOWN = shown_commands()


def test_the_documents_show_the_commands():
    """The extraction finds the README's command list and the docs' examples."""
    texts = [c.text for c in SHOWN]
    assert sum(c.where.startswith("README.md") for c in SHOWN) >= 15
    assert any(t.startswith("pdeladder store export URL --format FORMAT --out ") for t in texts)
    assert any(t.startswith("pdeladder scale 100,4,464,464,464") and "--fit" in t for t in texts)
    assert "pdeladder flows serve" in texts


def test_an_unknown_subcommand_or_option_is_caught():
    with pytest.raises(AssertionError, match="no subcommand 'store exprot'"):
        resolve(Shown("x.md:1", "pdeladder store exprot URL"))
    with pytest.raises(AssertionError, match="`pdeladder store export` has no --output"):
        resolve(Shown("x.md:1", "pdeladder store export URL --output DIR"))


@pytest.mark.parametrize("shown", SHOWN, ids=str)
def test_a_shown_command_exists_and_has_help(shown: Shown):
    for path, _ in resolve(shown):
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert result.exit_code == 0, f"{shown}: {result.output}"
        assert "Usage: pdeladder" in result.output


def walk(command: Any, path: tuple[str, ...] = ()):
    yield path, command
    if is_group(command):
        for name, sub in command.commands.items():
            yield from walk(sub, (*path, name))


GROUPS = [(p, c) for p, c in walk(typer.main.get_command(app)) if is_group(c)]


@pytest.mark.parametrize("path, group", GROUPS, ids=[" ".join(p) or "pdeladder" for p, _ in GROUPS])
def test_a_command_group_lists_every_subcommand(path, group):
    """A group's ``--help`` shows each of its subcommands, and a subgroup's one-line summary
    (which ``pdeladder --help`` shows) names them all."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    for name in group.commands:
        assert re.search(rf"│ {re.escape(name)}\s", result.output), result.output
    if path:
        summary = (group.help or "").split("\n\n")[0]
        for name in group.commands:
            assert re.search(rf"\b{re.escape(name)}\b", summary), f"{name!r} not in {summary!r}"


def test_every_command_is_shown_in_the_readme():
    readme = [c for c in SHOWN if c.where.startswith("README.md")]
    listed = {" ".join(p) for c in readme for p, _ in resolve(c)}
    every = {" ".join(p) for p, c in walk(typer.main.get_command(app)) if p}
    assert every - {" ".join(p) for p, _ in GROUPS} <= listed


#: Placeholders of the README's command list, filled in for a real run.
def fill(text: str, store: Path, out: Path) -> list[str]:
    text = re.sub(r"\[[^\]]*\]", "", text)  # optional parts left out
    values = {
        "FAMILY": "heat", "D": "1", "N": "9", "T": "3", "S": "0", "STORE": str(store),
        "URL": str(store), "FILE": str(ROOT / "examples" / "quickstart.yaml"), "FORMAT": "vtk",
        "DIR": str(out), "G": "adhoc/heat/1d_n9_t3", "I": "0",
    }  # fmt: skip
    return [values.get(t, t) for t in text.split()[1:]]


#: Cheap commands of the README's list, in order (solve writes the store the others read).
REAL = [
    "pdeladder solve FAMILY",
    "pdeladder solvers list",
    "pdeladder curriculum schema",
    "pdeladder curriculum validate FILE",
    "pdeladder store inspect|verify URL",
    "pdeladder store plot URL",
    "pdeladder store export URL",
]


def test_cheap_commands_run_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # where plot writes its PNG
    readme = [c.text for c in SHOWN if c.where.startswith("README.md")]
    store = tmp_path / "tiny.zarr"
    for prefix in REAL:
        [text] = [t for t in readme if t.startswith(prefix + " ") or t == prefix]
        args = fill(text, store, tmp_path / "export")
        if args[:2] == ["store", "export"]:  # vtk writes one sample
            args += ["--group", "adhoc/heat/1d_n9_t3", "--sample", "0"]
        runs = [[args[0], sub, *args[2:]] for sub in args[1].split("|")]
        for argv in runs:
            result = CliRunner().invoke(app, argv, env={"COLUMNS": "100"})
            assert result.exit_code == 0, f"pdeladder {' '.join(argv)}: {result.output}"
    assert (tmp_path / "adhoc_heat_1d_n9_t3_0.png").stat().st_size > 0
    assert list((tmp_path / "export").glob("*.pvd"))
    schema = CliRunner().invoke(app, ["curriculum", "schema"]).output
    assert "stages" in json.loads(schema)["properties"]


#: A time in minutes; core time ("1.15 min of one core", a plan's estimate) is not wall time.
MINUTES = re.compile(
    r"\b(?:\d+(?:\.\d+)?(?:\s*[-–]\s*\d+)?|two|three|five|ten|fifteen)[\s-]*min(?:ute)?s?\b"
    r"(?!\s+of\s+(?:one|a)\s+core)",
    re.I,
)


def demo_time_sentences(text: str) -> list[str]:
    """The sentences that give the demo (or the quick-start curriculum) a time in minutes."""
    sentences = re.split(r"(?<=[.!?])\s+|\n\s*\n", text)
    return [
        " ".join(s.split())
        for s in sentences
        if re.search(r"\b(?:demo|quick-?start)", s, re.I) and MINUTES.search(s)
    ]


def test_the_demo_time_is_stated_once():
    """One place, the README's Quick start, gives the demo's measured time and the machine; the
    other documents and the quick-start curriculum point there."""
    assert demo_time_sentences("The demo takes 8-10 minutes. A quick-start in two minutes.") == [
        "The demo takes 8-10 minutes.",
        "A quick-start in two minutes.",
    ]
    found = {
        path.relative_to(ROOT).as_posix(): demo_time_sentences(path.read_text("utf-8"))
        for path in [*DOCUMENTS, *sorted((ROOT / "examples").glob("*.yaml"))]
    }
    stated = {path: s for path, sentences in found.items() for s in sentences}
    assert list(stated) == ["README.md"], stated
    assert "`make demo` took 13 minutes on a 2-core Linux VM" in stated["README.md"]


def test_the_readme_list_shows_every_required_option():
    """Each command of the README's list shows the options it cannot run without (export's
    --out was missing)."""
    listed = [c for c in SHOWN if c.where.startswith("README.md") and len(c.text.split()) > 2]
    checked = set()
    for shown in listed:
        for path, command in resolve(shown):
            required = {p.opts[0] for p in command.params if p.required and p.opts[0][:2] == "--"}
            missing = required - set(LONG_OPTION.findall(shown.text))
            assert not missing, f"{shown}: `pdeladder {' '.join(path)}` needs {sorted(missing)}"
            checked.add(" ".join(path))
    assert {"store export", "store plot", "solve", "predict"} <= checked
