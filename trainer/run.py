"""``python -m pdeladder.trainer.run CURRICULUM [options]``: the training entry point for
``ray job submit -- python -m pdeladder.trainer.run ...`` (same options as ``pdeladder train``)."""

import typer

from pdeladder.errors import exit_on_error
from pdeladder.trainer.cli import train


def main() -> None:
    exit_on_error(lambda: typer.run(train))


if __name__ == "__main__":
    main()
