"""Entry points: how third-party packages add model providers and agent tools.

A package declares, in its `pyproject.toml`,

    [project.entry-points."assay.providers"]
    myprovider = "my_package.provider:PROVIDER"
    [project.entry-points."assay.tools"]
    calculator = "my_package.tools:CALCULATOR"

and once it is installed, `myprovider/MODEL` is a model spec and a task may name the
`calculator` tool (docs/extending.md). Entry points are read from the installed packages'
metadata (`importlib.metadata`); a plugin's module is imported only when something names it
(a model spec of its provider, a task that uses its tool), so a broken or slow plugin costs
nothing to a command that does not use it. A plugin that fails to import, or whose object
is not what the group takes, is an InputError (exit 2) that names the entry point, its
distribution and the error.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal

from assay.errors import InputError

if TYPE_CHECKING:
    from importlib import metadata

__all__ = ["GROUPS", "Group", "PluginError", "entry_point_names", "load_entry_point", "plugin_error"]

Group = Literal["assay.providers", "assay.tools"]
GROUPS: tuple[Group, ...] = ("assay.providers", "assay.tools")


class PluginError(InputError):
    """An installed plugin could not be loaded, or is not what its entry point group takes."""


@functools.cache
def _entry_points(group: Group) -> dict[str, metadata.EntryPoint]:
    """The group's entry points by name (read once per process; the first of a name wins, as
    `importlib.metadata` orders distributions along sys.path)."""
    from importlib import metadata  # only when a name is not a built-in one (the scan takes ~20 ms)

    out: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group):
        out.setdefault(ep.name, ep)
    return out


def entry_point_names(group: Group) -> list[str]:
    """Names the installed packages declare in `group`, sorted, without importing any of them."""
    return sorted(_entry_points(group))


def _distribution(ep: metadata.EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"


def load_entry_point(group: Group, name: str, field: str) -> object | None:
    """The object entry point `name` of `group` refers to; None when no package declares it.

    PluginError naming the entry point and its distribution when its module fails to import
    (whatever the plugin raised: it is the plugin's fault, not the harness's) or lacks the
    object. `field` is where the name came from (`--agent`, `tools[0]`, ...)."""
    ep = _entry_points(group).get(name)
    if ep is None:
        return None
    try:
        return ep.load()
    except Exception as e:  # noqa: BLE001 - any import-time failure of third-party code is reported as its own
        raise PluginError(None, field, f"plugin {name!r} ({group} entry point {ep.value!r} of "
                                       f"{_distribution(ep)}) failed to load: {type(e).__name__}: {e}") from e


def plugin_error(group: Group, name: str, field: str, reason: str) -> PluginError:
    """The error for entry point `name` of `group` whose object is not usable (`reason`)."""
    ep = _entry_points(group).get(name)
    dist = _distribution(ep) if ep is not None else "an unknown distribution"
    return PluginError(None, field, f"plugin {name!r} ({group} entry point of {dist}): {reason}")
