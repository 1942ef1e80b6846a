"""``pdeladder flows ...``: serve the Prefect deployments, with a local server when none is set."""

import os
from contextlib import nullcontext
from typing import Annotated

import typer

from pdeladder.errors import ServiceError

app = typer.Typer(
    help="Prefect flows: serve the data-campaign, train and closed-loop deployments.",
    no_args_is_help=True,
)


@app.command("serve")
def serve(
    host: Annotated[
        str, typer.Option(help="Address of the local Prefect server started when none is set.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of that local server.")] = 4200,
    limit: Annotated[
        int, typer.Option(min=1, help="Flow runs executed at the same time by this process.")
    ] = 1,
    startup_timeout: Annotated[
        float, typer.Option(min=1, help="Seconds to wait for the local server to answer.")
    ] = 300,
) -> None:
    """Serve the deployments until interrupted.

    With PREFECT_API_URL set, they are registered on that server; otherwise a local server
    (API and UI) is started on HOST:PORT and stopped on exit.
    """
    from prefect import serve as prefect_serve
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from pdeladder.flows.deployments import deployments
    from pdeladder.flows.server import local_server

    configured = os.environ.get("PREFECT_API_URL")
    with (
        nullcontext(configured)
        if configured
        else local_server(host, port, startup_timeout) as api_url
    ):
        os.environ["PREFECT_API_URL"] = api_url  # flow-run processes report to the same server
        with temporary_settings({PREFECT_API_URL: api_url}):
            with get_client(sync_client=True) as client:
                error = client.api_healthcheck()
            if error is not None:
                raise ServiceError(f"no Prefect server at {api_url}: {error}")
            typer.echo(f"Prefect UI: {get_current_settings().ui_url}")
            prefect_serve(*deployments(), limit=limit, pause_on_shutdown=False)
