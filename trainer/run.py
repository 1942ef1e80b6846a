"""``python -m pdeladder.trainer.run CURRICULUM [options]``: the training entry point for
``ray job submit -- python -m pdeladder.trainer.run ...`` (same options as ``pdeladder train``)."""

import sys

import typer

from pdeladder.errors import PdeladderError
from pdeladder.trainer.cli import train


def main() -> None:
    try:
        typer.run(train)
    except PdeladderError as err:
        typer.secho(f"error: {err}", err=True, fg=typer.colors.RED)
        sys.exit(2)


if __name__ == "__main__":
    main()
