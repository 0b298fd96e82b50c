"""`assay serve` and `assay users`: the web app and the people who may use it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from assay.defaults import DEFAULTS
from assay.errors import InputError

if TYPE_CHECKING:

    from assay.store import Store
from assay.cli import term
from assay.cli.app import CreateOpt, app
from assay.cli.term import (
    command_store,
    fail,
    open_existing,
)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on (not loopback: needs --allow-remote, and accounts or --token)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8700,
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="let a non-loopback --host serve other machines (sign-in is then always on)")] = False,
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
    suite: Annotated[list[Path] | None, typer.Option("--suite", help="tasks offered for human play; repeatable")] = None,
    token: Annotated[str | None, typer.Option("--token",
                                              help="(or ASSAY_TOKEN) a shared secret that signs in as the one identity `admin` (plays as human:admin); accounts from `assay users` work beside it")] = None,
    allowed_host: Annotated[list[str] | None, typer.Option("--allowed-host", help="a host name browsers use to reach this server (the Host header), beside the loopback names; repeatable")] = None,
    campaign: Annotated[str, typer.Option(help="the campaign people's plays join unless they name another (default: assay run's, so people are ranked beside the models)")] = DEFAULTS.campaign,
) -> None:
    """The web app: leaderboard, run viewer, JSON API, and human play (human:NAME) on --suite tasks.

    With a token or accounts, every page and API call needs sign-in (docs/web.md)."""
    from assay.config import load_config, settings, store_url
    from assay.web.app import create_app
    from assay.web.ops import run_server

    try:
        url = store_url(store, load_config())
        token = token if token is not None else settings().web_token
        web = create_app(url, suite or None, token=token, allowed_hosts=allowed_host or [], listen_host=host,
                         allow_remote=allow_remote, play_campaign=campaign, request_log=sys.stderr,
                         create_store=create)
    except InputError as e:
        fail(e)
    try:
        _check_port_free(host, port)
    except InputError as e:
        fail(e)
    shown = f"[{host}]" if ":" in host else host
    term.err.print(f"assay web app on http://{shown}:{port}/ (store {url}); health at /healthz; Ctrl-C or SIGTERM stops it "
              "(play sessions resume at the next start)")
    stopped_by = run_server(web, host, port)
    if stopped_by is not None:
        term.err.print(f"assay web app stopped ({stopped_by}); play sessions in flight resume at the next start")


def _check_port_free(host: str, port: int) -> None:
    """A port in use (or an address this machine lacks) is exit 2, not uvicorn's traceback."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host.strip("[]"), port))
        except OSError as e:
            raise InputError(None, "--port", f"cannot listen on {host}:{port}: {e.strerror or e}") from None


users_app = typer.Typer(no_args_is_help=True, help="people who may use the web app (assay serve): add, list, remove")


app.add_typer(users_app, name="users")


def _users_store(store: str | None, new: bool, create: bool = False) -> Store:
    from assay.config import load_config, store_url

    try:
        url = store_url(store, load_config())
        return command_store(url, create=create) if new else open_existing(url)
    except InputError as e:
        fail(e)


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="the person's name (their plays are human:NAME)")],
    role: Annotated[str, typer.Option(help="user|expert|admin: experts grade rubric items by hand, admins see every session")] = "user",
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
) -> None:
    """Add an account; prints its secret token once (the store keeps only a hash of it)."""
    from assay.store.accounts import add_account

    st = _users_store(store, new=True, create=create)
    try:
        secret = add_account(st, name, role)
    except InputError as e:
        fail(e)
    finally:
        st.close()
    sys.stdout.write(secret + "\n")
    sys.stderr.write(f"added {name} ({role}); the token above is shown only now: give it to {name}, "
                     "who pastes it at the web app's sign-in page\n")


@users_app.command("list")
def users_list(
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    json_flag: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """The accounts: name, role, when added (never a token)."""
    import datetime

    from assay.store.accounts import accounts

    st = _users_store(store, new=False)
    try:
        rows = [a.model_dump() for a in accounts(st)]
    finally:
        st.close()
    if json_flag:
        sys.stdout.write(json.dumps({"users": rows}, indent=2) + "\n")
        return
    for r in rows:
        when = datetime.datetime.fromtimestamp(r["created_at"], datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        sys.stdout.write(f"{r['name']}\t{r['role']}\t{when}\n")
    if not rows:
        sys.stderr.write("no accounts\n")


@users_app.command("remove")
def users_remove(
    name: Annotated[str, typer.Argument(help="the account to remove (its sign-ins end at once)")],
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
) -> None:
    """Remove an account; its stored runs stay."""
    from assay.store.accounts import remove_account

    st = _users_store(store, new=False)
    try:
        remove_account(st, name)
    except InputError as e:
        fail(e)
    finally:
        st.close()
    sys.stderr.write(f"removed {name}\n")
