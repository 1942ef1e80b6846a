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


class ClusterLostError(ServiceError):
    """The Ray cluster this process joined is gone: nothing in this process can use Ray again,
    so a retry here fails the same way (a rerun, once the cluster is back, resumes)."""


def exit_on_error(command: Callable[..., object]) -> None:
    """Run a command-line entry point; a :class:`PdeladderError` or a usage error (a bad option
    value, an unknown choice, a missing argument) becomes one red line on stderr and exit code
    2 (tracebacks are for bugs, not for bad input). A typer or click application is run with
    ``standalone_mode=False``, so that its usage errors come here instead of printing a box;
    ``--help`` and ``typer.Exit`` keep their exit codes."""
    import typer

    click = _click_exceptions()
    try:
        if isinstance(command, typer.Typer):
            code = command(standalone_mode=False)
            sys.exit(code if isinstance(code, int) else 0)
        command()
    except click.NoArgsIsHelpError as err:  # no arguments at all: typer has printed the help
        sys.exit(err.exit_code)
    except click.ClickException as err:
        typer.secho(f"error: {usage_line(err)}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    except typer.Abort:
        typer.secho("error: aborted", err=True, fg=typer.colors.RED)
        sys.exit(1)
    except PdeladderError as err:
        typer.secho(f"error: {one_line(str(err))}", err=True, fg=typer.colors.RED)
        sys.exit(2)


def _click_exceptions():
    """The exceptions of the click that typer runs on: typer 0.2x vendors it as
    ``typer._click`` (its ``BadParameter`` is not ``click.BadParameter``), older ones use click."""
    try:
        from typer._click import exceptions
    except ImportError:  # typer before it vendored click
        from click import exceptions
    return exceptions


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined by spaces."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def usage_line(err: Exception) -> str:
    """A click error as one line: the command, the problem and where help is."""
    ctx = getattr(err, "ctx", None)
    message = one_line(err.format_message()).replace("Value error, ", "")
    if ctx is None:
        return message
    return f"{ctx.command_path}: {message} (see {ctx.command_path} --help)"
