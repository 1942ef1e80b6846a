"""Every code folder with an ``__init__.py`` is a package that ``pyproject.toml`` installs: an
editable install finds an unlisted one by path, a wheel leaves it out. A folder with a
``pyproject.toml`` of its own is another distribution (the plugin in ``examples/plugins/``)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_subpackage_is_listed_in_pyproject():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    found = set()
    for name, folder in setup["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            above = [ROOT / folder / Path(*rel[:k]) for k in range(1, len(rel))]
            if any((d / "pyproject.toml").exists() for d in above):
                continue  # another distribution's package
            found.add(".".join((name, *rel)))
    assert found - listed == set(), (
        f"packages missing from pyproject.toml: {sorted(found - listed)}"
    )
