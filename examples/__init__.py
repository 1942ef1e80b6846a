"""The example curricula, shipped with pdeladder as package data.

``quickstart.yaml`` is the demo's (``pdeladder demo``, the flows' default curriculum);
``full.yaml`` is a real campaign. :func:`path` finds them wherever pdeladder is installed, so
that the flows' defaults work from any folder, not only from a checkout.

>>> path("quickstart.yaml").name
'quickstart.yaml'
"""

from importlib.resources import files
from pathlib import Path

from pdeladder.errors import UserInputError

#: The demo's curriculum, the default of every flow.
QUICKSTART = "quickstart.yaml"


def names() -> list[str]:
    """The example curricula's file names, sorted."""
    return sorted(f.name for f in files(__name__).iterdir() if f.name.endswith(".yaml"))


def path(name: str = QUICKSTART) -> Path:
    """The installed file of the example curriculum ``name`` (a file name from :func:`names`)."""
    file = files(__name__) / name
    if not name.endswith(".yaml") or not file.is_file():
        raise UserInputError(f"no example curriculum {name!r}; the examples are {names()}")
    return Path(str(file))
