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
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

from assay.errors import InputError

if TYPE_CHECKING:
    from importlib import metadata

__all__ = ["GROUPS", "Group", "PluginError", "Registry", "entry_point_names", "load_entry_point", "plugin_error"]

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


class _Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=_Named)


class Registry(Generic[T]):
    """The one registry of a kind of extension (providers, tools): the built-ins, then the
    plugins of its entry point `group`, each loaded and checked when first named.

    A plugin's entry point refers to a `kind` (or a callable returning one) whose `name` is the
    entry point's; `check(obj, field)` raises a reason (ValueError) for one that is not usable."""

    def __init__(self, group: Group, kind: type[T], builtins: dict[str, T],
                 check: Callable[[T], None] | None = None) -> None:
        self.group = group
        self.kind = kind
        self.items: dict[str, T] = dict(builtins)
        self._check = check

    def register(self, item: T) -> None:
        """Register `item` in this process (what an entry point does when first named)."""
        if not isinstance(item, self.kind):
            name = self.kind.__name__
            raise TypeError(f"register_{name.lower()} takes a {name}, not {type(item).__name__}")
        self.items[item.name] = item

    def names(self) -> list[str]:
        """Every name: the registered ones, then the installed plugins' (not imported)."""
        return list(self.items) + [n for n in entry_point_names(self.group) if n not in self.items]

    def has(self, name: str) -> bool:
        """`name` is registered or an installed plugin's (not imported)."""
        return name in self.items or name in entry_point_names(self.group)

    def get(self, name: str, field: str) -> T | None:
        """The item `name`, loading its plugin on first use; None when no one provides it.

        A plugin that fails to load, or whose entry point is not usable, is a PluginError
        (exit 2) naming its distribution."""
        found = self.items.get(name)
        if found is not None:
            return found
        obj = load_entry_point(self.group, name, field)
        if obj is None:
            return None
        if not isinstance(obj, self.kind) and callable(obj):
            obj = obj()
        kind = self.kind
        if not isinstance(obj, kind):
            raise plugin_error(self.group, name, field,
                               f"is a {type(obj).__name__}, not an {kind.__module__}.{kind.__qualname__}")
        if obj.name != name:
            raise plugin_error(self.group, name, field, f"its {kind.__name__} is named {obj.name!r}, not {name!r}")
        if self._check is not None:
            try:
                self._check(obj)
            except ValueError as e:
                raise plugin_error(self.group, name, field, str(e)) from e
        self.items[name] = obj
        return obj
