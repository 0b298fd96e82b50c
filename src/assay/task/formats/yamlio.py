"""Reading task files: YAML/JSON whose parse errors name file, line and column, and text read
without following a link or blocking on a special file.

Task files come from the internet, so YAML is read within limits (docs/formats.md, "Limits of
the readers"): a "billion laughs" (aliases of aliases, under 1 KB, standing for a billion
strings) is cheap for PyYAML, which shares aliased nodes, but every later walk of the value
(validation, hashing, placeholders) expands it; so are refused, each with the line, column and
field where the limit was passed:
- aliases that together stand for more than MAX_ALIAS_NODES nodes, and an alias of a node that
  holds it (a cycle);
- aliases that make the document's scalars, every alias written out, longer than MAX_YAML_CHARS
  characters (3,000 aliases of one 2 MiB string are 3,001 nodes, but 6 GB of text once anything
  walks the value: the content hash's `json.dumps` does);
- nesting deeper than MAX_DEPTH (PyYAML composes recursively);
- integers of more digits than Python converts (a bare ValueError otherwise);
- a document of more than MAX_YAML_CHARS characters.
Events come from libyaml's C parser (what PyYAML's CLoader uses, ~10x its pure-Python parser);
the nodes are composed in Python, where the limits are counted, event by event: a document is
refused at the first event past a limit, before the rest of it is parsed.
JSON goes through `jsonio.loads_json` (size, then depth, then `json.loads`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import yaml
from yaml._yaml import CParser

from assay.errors import InputError
from assay.fs.paths import PathError
from assay.fs.reads import read_regular
from assay.task.formats.jsonio import MAX_INT_BITS, loads_json

MAX_DEPTH = 64
"""Sequences and mappings nested deeper than this are refused."""
MAX_ALIAS_NODES = 10_000
"""Aliases may stand for this many nodes in all (an anchor reused for shared defaults stays far below)."""
MAX_YAML_CHARS = 4 * 1024 * 1024
"""A YAML document longer than this is refused (a task file is far smaller), and so is one whose
scalars, every alias written out, are longer than this."""


class _Refused(yaml.MarkedYAMLError):
    """A YAML document past one of the limits: the reason, where, and the field path there."""

    def __init__(self, problem: str, mark: Any, field: str | None) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.field = field


class BoundedLoader(yaml.composer.Composer, CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """PyYAML's safe loader on libyaml's events, with the limits above counted while the document
    is composed (Python's `Composer` before `CParser` in the order, so composing is ours)."""

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._path: list[str] = []
        self._expanded = 0  # nodes of the document as if every alias were expanded
        self._via_aliases = 0  # of which aliases stand for
        self._chars = 0  # characters of the document's scalars as if every alias were expanded
        self._sizes: dict[int, tuple[int, int]] = {}  # id(anchored node) -> its nodes and characters, aliases expanded
        self._fields: dict[int, str | None] = {}  # id(node) -> its field path (for errors in construction)

    def _field(self, extra: str = "") -> str | None:
        return ("".join(self._path) + extra).lstrip(".") or None

    def _step(self, parent: Any, index: Any) -> str:
        if isinstance(parent, yaml.SequenceNode) and isinstance(index, int):
            return f"[{index}]"
        if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.ScalarNode):
            return f".{index.value}"
        return ""

    def _next_event(self) -> Any:
        """The event about to be composed (libyaml's event types are not in PyYAML's stubs)."""
        return self.peek_event()

    def compose_node(self, parent: Any, index: Any) -> Any:
        step = self._step(parent, index)
        if self.check_event(yaml.AliasEvent):
            event = self._next_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                sizes = self._sizes.get(id(target))
                if sizes is None:
                    raise _Refused(f"alias *{event.anchor} refers to a node that contains it (a cycle)",
                                   event.start_mark, self._field(step))
                size, chars = sizes
                self._expanded += size
                self._via_aliases += size
                self._chars += chars
                if self._via_aliases > MAX_ALIAS_NODES:
                    raise _Refused(f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes (an alias bomb?); "
                                   f"at alias *{event.anchor}", event.start_mark, self._field(step))
                if self._chars > MAX_YAML_CHARS:
                    raise _Refused(f"aliases expand the document's text to more than {MAX_YAML_CHARS:,} characters "
                                   f"(an alias bomb?); at alias *{event.anchor} of {chars:,} characters",
                                   event.start_mark, self._field(step))
            return super().compose_node(parent, index)
        if len(self._path) >= MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self._next_event().start_mark, self._field(step))
        anchor = self._next_event().anchor
        before, chars_before = self._expanded, self._chars
        self._path.append(step)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._path.pop()
        self._expanded += 1
        if isinstance(node, yaml.ScalarNode):
            self._chars += len(node.value)
        self._fields[id(node)] = self._field(step)
        if anchor is not None:
            self._sizes[id(node)] = (self._expanded - before, self._chars - chars_before)
        return node

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        """PyYAML's, with a value its constructors cannot build refused at the node: an
        impossible date (`2024-13-45` resolves as a timestamp, and `datetime.date` raises
        ValueError), `!!bool maybe` (KeyError), `!!float abc`, `!!timestamp x` (AttributeError)
        raise no YAMLError of their own."""
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
            raise _Refused(f"the value {str(node.value)[:60]!r} cannot be read as {node.tag.rsplit(':', 1)[-1]} "
                           f"({type(e).__name__}: {str(e)[:120]})", node.start_mark,
                           self._fields.get(id(node))) from None

    def construct_yaml_int(self, node: Any) -> int:
        try:
            value = int(super().construct_yaml_int(node))
        except ValueError as e:  # int() refuses more digits than sys.get_int_max_str_digits()
            if "digits" not in str(e):
                raise  # not an integer at all (`!!int 0x`): `construct_object` says so
            raise _Refused(f"an integer of more than {sys.get_int_max_str_digits():,} digits",
                           node.start_mark, self._fields.get(id(node))) from None
        if value.bit_length() > MAX_INT_BITS:  # hexadecimal and sexagesimal integers pass the digit count
            raise _Refused("an integer past a float's range", node.start_mark, self._fields.get(id(node)))
        return value


    def timestamp_text(self, node: Any) -> str:
        """A date or time as the text it is written in (`due: 2024-03-01` is the string a brief
        shows), as JSON has it: a `datetime` in a task broke its hash and its placeholders. One
        that is no date (`2024-13-45`, `!!timestamp x`) is refused as before (`construct_object`)."""
        self.construct_yaml_timestamp(node)  # raises on an impossible date
        return str(self.construct_scalar(node))

    def refuse_binary(self, node: Any) -> Any:
        raise _Refused("a !!binary value (task files hold text)", node.start_mark, self._fields.get(id(node)))


cast("Any", BoundedLoader).add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
cast("Any", BoundedLoader).add_constructor("tag:yaml.org,2002:timestamp", BoundedLoader.timestamp_text)
cast("Any", BoundedLoader).add_constructor("tag:yaml.org,2002:binary", BoundedLoader.refuse_binary)


def load_yaml_text(text: str, file: Path | str) -> Any:
    """One YAML document, within the limits above; InputError(file, field, reason, line, column)."""
    if len(text) > MAX_YAML_CHARS:
        raise InputError(file, None, f"{len(text):,} characters of YAML, more than the {MAX_YAML_CHARS:,} read")
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as e:
        mark = e.problem_mark
        raise InputError(file, e.field, f"refused: {e.problem}", line=mark.line + 1 if mark else None,
                         column=mark.column + 1 if mark else None) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        reason = f"does not parse as YAML: {e.problem or e}"
        if "maximum nesting depth" in str(e.problem):  # libyaml's own cap (1,000), met while it scans ahead
            reason = f"refused: nested deeper than {MAX_DEPTH} levels"
        raise InputError(file, None, reason, line=line, column=col) from None
    except yaml.YAMLError as e:
        raise InputError(file, None, f"does not parse as YAML: {e}") from None
    finally:
        loader.dispose()


def load_yaml(path: Path) -> Any:
    return load_yaml_text(read_text(path), path)


def load_json(path: Path) -> Any:
    """A task's JSON file, within `jsonio`'s limits (size, depth, digits)."""
    return loads_json(read_text(path), path)


MAX_TASK_FILE_BYTES = 256 * 1024 * 1024
"""A task file larger than this is refused (task files come from the internet)."""


def read_text(path: Path) -> str:
    """A task file's text: a regular file (never a link, a FIFO or a device), UTF-8, bounded."""
    try:
        return read_regular(path, MAX_TASK_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, None, f"not UTF-8 text (byte {e.start})") from None
    except PathError as e:
        raise InputError(path, None, str(e).removeprefix(f"{path}: ")) from None
    except OSError as e:
        raise InputError(path, None, f"cannot read: {e.strerror}") from None
