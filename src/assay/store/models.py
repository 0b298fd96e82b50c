"""ORM schema of the store (SQLAlchemy 2 declarative).

The tables mirror the pydantic records in :mod:`assay.record`: one row per run attempt with
the columns reports filter and group on, plus the full :class:`~assay.record.RunRecord` as
JSON text so nothing is lost; the transcript events; the grade with its audit; the leases
(run keys claimed by a worker); and the judge cache. JSON is stored as ``Text`` (serialised
by the store) so the same schema works unchanged on SQLite and PostgreSQL. Timestamps are UTC epoch seconds (``Float``).

The migrations in ``migrations/versions`` create exactly this schema; change both together.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Constraint names the migrations use too (stable names make later ALTERs portable).
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Campaign(Base):
    __tablename__ = "campaigns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True, nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)


class Run(Base):
    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    campaign: Mapped[str] = mapped_column(
        String(200), ForeignKey("campaigns.name"), nullable=False, index=True
    )
    key_digest: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    task_id: Mapped[str] = mapped_column(String(300), nullable=False)
    task_hash: Mapped[str] = mapped_column(String(128), nullable=False)
    agent: Mapped[str] = mapped_column(String(200), nullable=False)
    level: Mapped[str | None] = mapped_column(String(100), nullable=True)
    epoch: Mapped[int] = mapped_column(Integer, nullable=False)
    options_hash: Mapped[str] = mapped_column(String(128), nullable=False)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    end_reason: Mapped[str] = mapped_column(String(32), nullable=False)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    harness_version: Mapped[str] = mapped_column(String(100), nullable=False)
    model: Mapped[str | None] = mapped_column(String(200), nullable=True)
    sandbox: Mapped[str] = mapped_column(String(16), nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    record: Mapped[str] = mapped_column(Text, nullable=False)  # RunRecord.model_dump_json()

    __table_args__ = (Index("ix_runs_campaign_digest_attempt", "campaign", "key_digest", "attempt"),)


class EventRow(Base):
    __tablename__ = "events"

    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    t: Mapped[float] = mapped_column(Float, nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    data: Mapped[str] = mapped_column(Text, nullable=False)  # JSON object


class Grade(Base):
    __tablename__ = "grades"

    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    grade: Mapped[str] = mapped_column(Text, nullable=False)  # JSON: RunRecord.grade
    audit: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON: grade["audit"], if any


class RunSummary(Base):
    """What a report reads of a run (`assay.store.summaries`), written with the run: its
    columns copied from `runs`, its small JSON values as text, its token counts and costs as
    numbers. A table of its own, read without `runs`: a report over 100,000 runs then never
    pages through the records nor parses them (on SQLite before 3.45 each JSON path read
    parses the whole record again). Derived data: `summaries.rebuild_summaries` recomputes it
    from the records (migration 0006)."""

    __tablename__ = "run_summaries"

    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    key_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    campaign: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    task_id: Mapped[str] = mapped_column(String(300), nullable=False)
    task_hash: Mapped[str] = mapped_column(String(128), nullable=False)
    agent: Mapped[str] = mapped_column(String(200), nullable=False)
    level: Mapped[str | None] = mapped_column(String(100), nullable=True)
    epoch: Mapped[int] = mapped_column(Integer, nullable=False)
    options_hash: Mapped[str] = mapped_column(String(128), nullable=False)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    end_reason: Mapped[str] = mapped_column(String(32), nullable=False)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    harness_version: Mapped[str] = mapped_column(String(100), nullable=False)
    model: Mapped[str | None] = mapped_column(String(200), nullable=True)
    sandbox: Mapped[str] = mapped_column(String(16), nullable=False)
    # The record's values (JSON text; NULL: absent or null) and numbers (absent: the default).
    kinds: Mapped[str | None] = mapped_column(Text, nullable=True)
    value: Mapped[str | None] = mapped_column(Text, nullable=True)
    options: Mapped[str | None] = mapped_column(Text, nullable=True)
    task_meta: Mapped[str | None] = mapped_column(Text, nullable=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False)
    output_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False)
    cost_usd: Mapped[float | None] = mapped_column(Float, nullable=True)  # NULL: a price is unknown
    judge_cost_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    tags: Mapped[str | None] = mapped_column(Text, nullable=True)
    grade: Mapped[str] = mapped_column(Text, nullable=False)  # JSON array: `summaries.GRADE_KEYS`' values


class Lease(Base):
    """A claim on one run key: which worker runs it, since when it last showed it is alive.

    A lease is live while ``heartbeat_at + ttl_s`` lies ahead (store clock: the database
    server's on PostgreSQL); a lease past that is taken over by the next claim. ``attempt`` is
    the attempt number the holder runs, decided under the claim so two attempts of one key
    never share a number.
    """

    __tablename__ = "leases"

    campaign: Mapped[str] = mapped_column(String(200), primary_key=True)
    key_digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    heartbeat_at: Mapped[float] = mapped_column(Float, nullable=False)
    ttl_s: Mapped[float] = mapped_column(Float, nullable=False)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False)
    claimed_at: Mapped[float] = mapped_column(Float, nullable=False)


class JudgeCache(Base):
    __tablename__ = "judge_cache"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 hex
    value: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)


def max_length(table: Table, column: str) -> int:
    """The most characters `table.column` stores (PostgreSQL refuses longer strings)."""
    length = getattr(table.c[column].type, "length", None)
    if not isinstance(length, int):
        raise TypeError(f"{table.name}.{column} has no length limit")
    return length


campaigns_t: Table = Campaign.__table__  # type: ignore[assignment]
runs_t: Table = Run.__table__  # type: ignore[assignment]
events_t: Table = EventRow.__table__  # type: ignore[assignment]
grades_t: Table = Grade.__table__  # type: ignore[assignment]
summaries_t: Table = RunSummary.__table__  # type: ignore[assignment]
leases_t: Table = Lease.__table__  # type: ignore[assignment]
judge_cache_t: Table = JudgeCache.__table__  # type: ignore[assignment]


class User(Base):
    """A person who may use the web app (`assay users`): the token is stored as its SHA-256 only."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)


users_t: Table = User.__table__  # type: ignore[assignment]


class ExpertLabel(Base):
    """An expert's verdict on one rubric item of one stored run's answer (web app, part 3)."""

    __tablename__ = "expert_labels"

    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    item_id: Mapped[str] = mapped_column(String(300), primary_key=True)
    labeller: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(300), nullable=False)
    met: Mapped[bool] = mapped_column(Boolean, nullable=False)
    note: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)


expert_labels_t: Table = ExpertLabel.__table__  # type: ignore[assignment]


class PlaySessionRow(Base):
    """A human play session of the web app (`assay.store.play`): enough to pick it up again."""

    __tablename__ = "play_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    name: Mapped[str] = mapped_column(String(64), nullable=False)
    task_id: Mapped[str] = mapped_column(String(300), nullable=False)
    level: Mapped[str | None] = mapped_column(String(100), nullable=True)
    campaign: Mapped[str] = mapped_column(String(200), nullable=False)
    epoch: Mapped[int] = mapped_column(Integer, nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    actions: Mapped[str] = mapped_column(Text, nullable=False)  # JSON list of recorded actions
    run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False)


play_sessions_t: Table = PlaySessionRow.__table__  # type: ignore[assignment]


class WebSignin(Base):
    """A browser sign-in of the web app: the SHA-256 of its cookie value, never the value."""

    __tablename__ = "web_signins"

    sid_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    csrf: Mapped[str] = mapped_column(String(64), nullable=False)
    account: Mapped[bool] = mapped_column(Boolean, nullable=False)
    expires: Mapped[float] = mapped_column(Float, nullable=False)


web_signins_t: Table = WebSignin.__table__  # type: ignore[assignment]
