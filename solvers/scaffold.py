"""``pdeladder solvers new NAME``: a ready package for a new equation family.

The package is the template in ``solvers/template/`` (package data) with the family's names
filled in by :class:`string.Template`: its pure part (``NAME/__init__.py``), its FEM part
(``NAME/fem.py``), a test that runs the family contract, a ``pyproject.toml`` that registers the
entry point, a README and a ``.gitignore``. Its physics is the heat equation, each block of it
marked ``REPLACE``; installed as written, it passes ``pdeladder solvers check NAME``.
"""

import importlib.metadata
import importlib.util
import keyword
import re
import secrets
import shutil
from importlib.resources import files
from pathlib import Path
from string import Template

from pdeladder.errors import UserInputError
from pdeladder.solvers.registry import family_names

#: Each template file of ``solvers/template/`` and its path in the new package.
FILES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "gitignore.tmpl": ".gitignore",
    "__init__.py.tmpl": "{name}/__init__.py",
    "fem.py.tmpl": "{name}/fem.py",
    "test_family.py.tmpl": "tests/test_{name}.py",
}
#: A family name: a lower-case Python identifier, also the package's import name.
NAME = re.compile(r"[a-z][a-z0-9_]*")


def check_name(name: str) -> None:
    """Refuse, in one line, a name that is no lower-case identifier, a registered family's, or
    an importable module's (the package would shadow it, or it the package)."""
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise UserInputError(
            f"family name {name!r}: not a lower-case Python identifier (a letter, then letters, "
            "digits and underscores; not a keyword), e.g. 'diffusion'"
        )
    if name in family_names():
        raise UserInputError(
            f"family name {name!r} is taken: `pdeladder solvers list` shows it; pick another"
        )
    try:
        taken = importlib.util.find_spec(name) is not None
    except ValueError:  # a module of that name is loaded, without a spec
        taken = True
    if taken:
        raise UserInputError(
            f"family name {name!r}: a module of that name is importable already, and the "
            "family's package is imported by its name; pick another"
        )


def values(name: str) -> dict[str, str]:
    """The template's placeholders for the family ``name`` (``demo_family``): ``$name``,
    ``$Class`` (``DemoFamily``), ``$title`` (``Demo family``), ``$distribution``
    (``demo-family``) and ``$pdeladder_version``."""
    return {
        "name": name,
        "Class": "".join(part.capitalize() for part in name.split("_")),
        "title": name.replace("_", " ").capitalize(),
        "distribution": name.replace("_", "-"),
        "pdeladder_version": importlib.metadata.version("pdeladder"),
    }


def render(name: str) -> dict[str, str]:
    """The new package's files, ``{relative path: text}``."""
    template = files("pdeladder.solvers") / "template"
    filled = values(name)
    return {
        path.format(name=name): Template((template / source).read_text("utf-8")).substitute(filled)
        for source, path in FILES.items()
    }


def new_family(name: str, directory: Path | None = None) -> Path:
    """Write the package of the new family ``name`` into ``directory`` (default ``./name``),
    which must not exist or be empty and whose parent must exist; returns its absolute path.

    The files are written into a hidden folder beside it, renamed into place when complete, so
    that a failure leaves nothing behind. Bad input raises a one-line :class:`UserInputError`.
    """
    check_name(name)
    target = Path(directory or name).absolute()
    if target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise UserInputError(f"{target}: exists and is not an empty folder; name a new one")
    if not target.parent.is_dir():
        raise UserInputError(f"{target}: its parent folder does not exist; create it first")
    texts = render(name)
    staging = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        staging.mkdir()
    except OSError as err:
        raise UserInputError(f"{target}: cannot write in its folder: {err.strerror}") from None
    try:
        for path, text in texts.items():
            (staging / path).parent.mkdir(parents=True, exist_ok=True)
            (staging / path).write_text(text, encoding="utf-8")
        staging.rename(target)  # replaces an empty folder
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserInputError(f"{target}: cannot be written: {err.strerror}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
