"""Package attributes imported on first use (PEP 562), so ``pdeladder --help`` stays fast."""

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: public name -> module (relative to ``package``
    when it starts with a dot), imported when the name is first looked up."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(exports[name], package), name)

    return __getattr__
