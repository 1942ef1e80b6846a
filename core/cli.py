"""The ``pdeladder`` command line: small commands over the library.

Each layer owns its sub-application (``solvers``, ``store``, ``curriculum``, ``flows``) and its
top-level commands (``solve``, ``train``, ``evaluate``, ``predict``, ``scale``); this module only assembles
them and turns :class:`~pdeladder.errors.PdeladderError` into a one-line message and exit code 2.
"""

import typer

from pdeladder.errors import exit_on_error

app = typer.Typer(
    name="pdeladder",
    help="Curriculum-driven PDE simulation data and a physics-informed neural-operator trainer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from pdeladder.curriculum import solve_cli
    from pdeladder.solvers import cli as solvers_cli

    app.add_typer(solvers_cli.app, name="solvers")
    app.command("solve")(solve_cli.solve)
    from pdeladder.dataset import cli as dataset_cli

    app.add_typer(dataset_cli.app, name="store")

    from pdeladder.curriculum import cli as curriculum_cli

    app.add_typer(curriculum_cli.app, name="curriculum")

    from pdeladder.flows import cli as flows_cli

    app.add_typer(flows_cli.app, name="flows")
    app.command("demo")(flows_cli.demo)

    from pdeladder.trainer import cli as trainer_cli

    app.command("train")(trainer_cli.train)
    app.command("evaluate")(trainer_cli.evaluate)
    app.command("predict")(trainer_cli.predict)
    from pdeladder.trainer import scale_cli

    app.command("scale")(scale_cli.scale)


_register()


def main() -> None:
    """Console-script entry point."""
    exit_on_error(app)
