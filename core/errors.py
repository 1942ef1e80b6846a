"""The exception hierarchy of pdeladder, in one place.

Every error a user can cause derives from :class:`PdeladderError`; the CLI turns it into a
one-line message and exit code 2. Messages say what was wrong, where, and what to do.
"""

import sys
from collections.abc import Callable


class PdeladderError(Exception):
    """Base of every error pdeladder raises on purpose."""


class UserInputError(PdeladderError, ValueError):
    """Bad input from a user: an unknown name, a value out of range, an unusable path."""


class UnknownNameError(UserInputError, KeyError):
    """A registry lookup failed; the message lists the available names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SolveError(PdeladderError, RuntimeError):
    """A solve failed (NaN, diverged Krylov or Newton solve, timeout); ``reason`` is short."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class FormatError(PdeladderError):
    """A store does not match the pdeladder format; the message names the path."""


class StoreError(PdeladderError, OSError):
    """A store cannot be opened, read or written (unreachable URL, corrupt chunk, ...)."""


class CurriculumError(UserInputError):
    """A curriculum file is invalid; the message names the field and the YAML line."""


class ServiceError(PdeladderError, RuntimeError):
    """A service (Prefect server, Ray cluster or job) cannot be started, reached or used."""


def exit_on_error(command: Callable[[], object]) -> None:
    """Run a command-line entry point; a :class:`PdeladderError` becomes one red line on stderr
    and exit code 2 (tracebacks are for bugs, not for bad input)."""
    try:
        command()
    except PdeladderError as err:
        import typer

        typer.secho(f"error: {err}", err=True, fg=typer.colors.RED)
        sys.exit(2)
