"""Schema of the store (SQLAlchemy Core tables: the store reads and writes with Core
statements, and importing the ORM would cost every command ~0.2 s of start-up).

The tables mirror the pydantic records in :mod:`assay.record`: one row per run attempt with
the columns reports filter and group on, plus the full :class:`~assay.record.RunRecord` as
JSON text so nothing is lost; the transcript events; the grade with its audit; the leases
(run keys claimed by a worker); and the judge cache. JSON is stored as ``Text`` (serialised
by the store) so the same schema works unchanged on SQLite and PostgreSQL. Timestamps are UTC epoch seconds (``Float``).

The migrations in ``migrations/versions`` create exactly this schema; change both together.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.types import TypeDecorator


def _no_nul(value: Any) -> Any:
    return value.replace("\x00", "\\u0000") if isinstance(value, str) and "\x00" in value else value


class Str(TypeDecorator[str]):
    """A VARCHAR any text can be written to: a NUL, which no PostgreSQL text holds (a task's,
    an agent's or an imported file's), is stored as its escape `\\u0000`, on every backend
    alike. Identities (task ids, agents) with control characters are refused before they
    get here; this keeps a stray one from crashing a save."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return _no_nul(value)


class FreeText(TypeDecorator[str]):
    """TEXT that is not JSON (a void reason, a task's domain): a NUL stored as `\\u0000`, as `Str`."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return _no_nul(value)


# Constraint names the migrations use too (stable names make later ALTERs portable).
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
}

metadata = MetaData(naming_convention=NAMING)
"""Every table of the store (what the migrations create; `alembic` compares against it)."""


campaigns_t: Table = Table(
    "campaigns",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", Str(200), unique=True, nullable=False),
    Column("created_at", Float, nullable=False),
)


runs_t: Table = Table(
    "runs",
    metadata,
    Column("run_id", Str(64), primary_key=True),
    Column("campaign", Str(200), ForeignKey("campaigns.name"), nullable=False, index=True),
    Column("key_digest", Str(64), nullable=False, index=True),
    Column("task_id", Str(300), nullable=False),
    Column("task_hash", Str(128), nullable=False),
    Column("agent", Str(200), nullable=False),
    Column("level", Str(100), nullable=True),
    Column("epoch", Integer, nullable=False),
    Column("options_hash", Str(128), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("status", Str(16), nullable=False),
    Column("end_reason", Str(32), nullable=False),
    Column("score", Float, nullable=True),
    Column("passed", Boolean, nullable=True),
    Column("harness_version", Str(100), nullable=False),
    Column("model", Str(200), nullable=True),
    Column("sandbox", Str(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("record", Text, nullable=False),  # the record's JSON (`record.json_text`)
    Index("ix_runs_campaign_digest_attempt", "campaign", "key_digest", "attempt"),
)


events_t: Table = Table(
    "events",
    metadata,
    Column("run_id", Str(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("t", Float, nullable=False),
    Column("kind", Str(32), nullable=False),
    Column("data", Text, nullable=False),  # JSON object
)


grades_t: Table = Table(
    "grades",
    metadata,
    Column("run_id", Str(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    Column("grade", Text, nullable=False),  # JSON: RunRecord.grade
    Column("audit", Text, nullable=True),  # JSON: grade["audit"], if any
)


REPORT_COLUMNS = ("run_id", "campaign", "task_id", "task_hash", "agent", "level", "epoch", "options_hash",
                  "attempt", "status", "end_reason", "score", "passed", "harness_version", "model", "sandbox")
"""The `runs` columns a report reads of each run, in this order (`Store.REPORT_COLUMNS`)."""
# The current attempt of every run key (`assay.store.current`): one row per (campaign, key
# digest), the attempt that ranks highest (attempt, then created_at, then run id: the attempt
# `Store.runs` gives), written in the same transaction as the save that made it current, with
# what reports aggregate as typed columns (no JSON to parse per run but the rubric's tags and
# judges). A report is a query over it. Derived data: `current.rebuild_current` recomputes it
# from the records (migration 0008).
current_t: Table = Table(
    "current_runs",
    metadata,
    Column("campaign", Str(200), primary_key=True),
    Column("key_digest", Str(64), primary_key=True),
    Column("run_id", Str(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    # The run's own columns, typed as in `runs`.
    *[Column(n, runs_t.c[n].type, nullable=runs_t.c[n].nullable) for n in REPORT_COLUMNS if n not in ("run_id", "campaign")],
    Column("kinds", FreeText, nullable=False),  # the record's kinds joined by ","
    Column("kind", Str(16), nullable=True),  # the primary kind (`record.primary_kind`); NULL: no kinds
    Column("void_reason", FreeText, nullable=True),
    Column("started_at", Float, nullable=True),  # the record's (what `assay compare` ranks a key's runs by)
    Column("search_mode", FreeText, nullable=False),  # the options' `search` ("off": none)
    Column("search", FreeText, nullable=True),  # the search backend offered (the record's `search`)
    # The task's facets (NULL: the task meta has none).
    Column("domain", FreeText, nullable=True),
    Column("modality", FreeText, nullable=True),
    Column("execution", FreeText, nullable=True),
    # The usage: absent counts 0, an absent cost 0, a null cost unknown (NULL).
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cache_read_tokens", BigInteger, nullable=False),
    Column("cache_write_tokens", BigInteger, nullable=False),
    Column("tokens", BigInteger, nullable=False),
    Column("cost_usd", Float, nullable=True),
    Column("judge_cost_usd", Float, nullable=True),
    Column("value_amount", Float, nullable=True),  # the task's value (NULL: none)
    Column("value_currency", FreeText, nullable=True),
    Column("averaged", Float, nullable=True),  # the score every mean takes (`build.averaged`); NULL: unscored
    Column("audit_removed", Integer, nullable=False),
    # The rubric grade (scoring NULL: none).
    Column("scoring", FreeText, nullable=True),
    Column("rubric_na", Integer, nullable=True),
    Column("tags", Text, nullable=True),  # JSON object tag -> score (NULL: none)
    Column("judge_agreed", Integer, nullable=True),  # the judge info (NULL: no judge graded)
    Column("judge_answered", Integer, nullable=True),
    Column("judge_na", Integer, nullable=True),
    Column("judge_votes", Integer, nullable=True),
    Column("judge_mode", FreeText, nullable=True),
    Column("judges", Text, nullable=True),  # JSON list of the judges
    # The scenario grade (uplift_adj NULL: none).
    Column("uplift_adj", Float, nullable=True),
    Column("contact_cost", Float, nullable=True),
    Column("solved", Boolean, nullable=True),
    Column("router_fallbacks", Integer, nullable=True),
    # The contract grade (sat NULL: none); sat_required: some predicate is required.
    Column("sat", Boolean, nullable=True),
    Column("sat_required", Boolean, nullable=True),
    Index("ix_current_runs_campaign_agent", "campaign", "agent"),
)


# A claim on one run key: which worker runs it, since when it last showed it is alive.
#
# A lease is live while ``heartbeat_at + ttl_s`` lies ahead (store clock: the database
# server's on PostgreSQL); a lease past that is taken over by the next claim. ``attempt`` is
# the attempt number the holder runs, decided under the claim so two attempts of one key
# never share a number.
leases_t: Table = Table(
    "leases",
    metadata,
    Column("campaign", Str(200), primary_key=True),
    Column("key_digest", Str(64), primary_key=True),
    Column("holder", Str(200), nullable=False, index=True),
    Column("heartbeat_at", Float, nullable=False),
    Column("ttl_s", Float, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("claimed_at", Float, nullable=False),
)


judge_cache_t: Table = Table(
    "judge_cache",
    metadata,
    Column("key", Str(64), primary_key=True),  # sha256 hex
    Column("value", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)


def max_length(table: Table, column: str) -> int:
    """The most characters `table.column` stores (PostgreSQL refuses longer strings)."""
    length = getattr(table.c[column].type, "length", None)
    if not isinstance(length, int):
        raise TypeError(f"{table.name}.{column} has no length limit")
    return length


def too_long(table: Table, column: str, value: str | None) -> str | None:
    """Why `value` cannot be stored in `table.column` (an InputError's reason), or None."""
    limit = max_length(table, column)
    if value is None or len(value) <= limit:
        return None
    return f"{value[:60] + '...'!r} is {len(value)} characters; the store keeps at most {limit}"


# A person who may use the web app (`assay users`): the token is stored as its SHA-256 only.
users_t: Table = Table(
    "users",
    metadata,
    Column("name", Str(64), primary_key=True),
    Column("token_sha256", Str(64), unique=True, nullable=False),
    Column("role", Str(16), nullable=False),
    Column("created_at", Float, nullable=False),
)


# An expert's verdict on one rubric item of one stored run's answer (web app, part 3).
expert_labels_t: Table = Table(
    "expert_labels",
    metadata,
    Column("run_id", Str(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    Column("item_id", Str(300), primary_key=True),
    Column("labeller", Str(64), primary_key=True),
    Column("task_id", Str(300), nullable=False),
    Column("met", Boolean, nullable=False),
    Column("note", FreeText, nullable=False),
    Column("created_at", Float, nullable=False),
)


# A human play session of the web app (`assay.store.play`): enough to pick it up again.
play_sessions_t: Table = Table(
    "play_sessions",
    metadata,
    Column("id", Str(64), primary_key=True),
    Column("owner", Str(64), nullable=True),
    Column("name", Str(64), nullable=False),
    Column("task_id", Str(300), nullable=False),
    Column("level", Str(100), nullable=True),
    Column("campaign", Str(200), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("state", Str(16), nullable=False, index=True),
    Column("actions", Text, nullable=False),  # JSON list of recorded actions
    Column("run_id", Str(64), nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)


# A browser sign-in of the web app: the SHA-256 of its cookie value, never the value.
web_signins_t: Table = Table(
    "web_signins",
    metadata,
    Column("sid_sha256", Str(64), primary_key=True),
    Column("name", Str(64), nullable=False),
    Column("role", Str(16), nullable=False),
    Column("csrf", Str(64), nullable=False),
    Column("account", Boolean, nullable=False),
    Column("expires", Float, nullable=False),
)
