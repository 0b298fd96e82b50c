"""Settings, read in one place: `assay.toml` (model aliases, prices, store) and every
`ASSAY_*` environment variable, plus the defaults of a run's options.

Nothing else in assay reads `ASSAY_*` variables: code that needs one calls `settings()`
(read when called, so a test or a long-lived server sees the current environment).
"""

from __future__ import annotations

import functools
import math
import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay.defaults import DEFAULTS, Defaults
from assay.errors import InputError

__all__ = ["DEFAULTS", "Config", "Defaults", "ModelAlias", "PriceConfig", "Settings", "config_path",
           "load_config", "settings", "store_url"]


WORKSPACE_QUOTA_BYTES = 4 * 1024**3
"""Default disk quota of one run's workspace (docs/user-guide.md, "Sandbox limits")."""
MIN_WORKSPACE_QUOTA_BYTES = 32 * 1024**2
COPY_MAX_FILES = 100_000
"""Default cap on the entries of a workspace copied or walked for grading."""
COPY_MAX_DEPTH = 64
"""Default cap on the folder depth of a workspace copied or walked for grading."""
LEASE_TTL_S = 60.0
"""Default lifetime of a claimed run's lease without a heartbeat (renewed every third of it);
another worker takes the run over once it has expired (docs/user-guide.md, "Several workers")."""


class PriceConfig(BaseModel):
    """Dollars per million tokens: finite and not negative (a NaN price made every cost NaN)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    input: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)
    output: float = Field(ge=0)


class ModelAlias(BaseModel):
    """`[models.ALIAS]` in assay.toml: any OpenAI-compatible or Anthropic endpoint."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    provider: str = "openai"
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    prices: PriceConfig | None = None
    context: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)
    max_retries: int = Field(default=5, ge=0, le=100)
    retry_base_delay: float = Field(default=1.0, ge=0, le=3600)
    timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    images: bool = True  # false for a text-only model: images become notes (docs/user-guide.md)


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: dict[str, ModelAlias] = Field(default_factory=dict)
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    store: str | None = None


class Settings(BaseModel):
    """Every `ASSAY_*` environment variable assay reads (documented in docs/user-guide.md)."""

    model_config = ConfigDict(frozen=True)  # one instance is shared by every caller of `settings()`
    config: Path = Path("assay.toml")  # ASSAY_CONFIG
    store: str | None = None  # ASSAY_STORE
    gateway_model: str | None = None  # ASSAY_GATEWAY_MODEL
    grade_timeout_s: float = DEFAULTS.grade_timeout_s  # ASSAY_GRADE_TIMEOUT_S
    check_timeout_s: float = DEFAULTS.check_timeout_s  # ASSAY_CHECK_TIMEOUT_S
    predicate_timeout_s: float = DEFAULTS.predicate_timeout_s  # ASSAY_PREDICATE_TIMEOUT_S
    darebench_cells: str = "table1"  # ASSAY_DAREBENCH_CELLS
    workspace_quota_bytes: int = WORKSPACE_QUOTA_BYTES  # ASSAY_WORKSPACE_QUOTA_BYTES (0: no quota)
    copy_max_files: int = COPY_MAX_FILES  # ASSAY_COPY_MAX_FILES
    copy_max_depth: int = COPY_MAX_DEPTH  # ASSAY_COPY_MAX_DEPTH
    brave_url: str | None = None  # ASSAY_BRAVE_URL (the Brave Search API's base URL; tests point it at a fake)
    web_token: str | None = Field(default=None, repr=False)  # ASSAY_TOKEN (assay serve's shared sign-in token)
    lease_ttl_s: float = LEASE_TTL_S  # ASSAY_LEASE_TTL_S (a claimed run's lease without a heartbeat expires)


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InputError(None, name, f"{raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(None, name, f"{raw!r} must be a positive, finite number of seconds")
    return value


def _count(name: str, default: int, *, minimum: int, zero_ok: bool = False) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InputError(None, name, f"{raw!r} is not a whole number") from None
    if zero_ok and value == 0:
        return 0
    if value < minimum:
        raise InputError(None, name, f"{raw!r} must be at least {minimum}" + (" (or 0 for none)" if zero_ok else ""))
    return value


def _url(name: str) -> str | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.startswith(("http://", "https://")):
        raise InputError(None, name, f"{raw!r} is not an http:// or https:// URL")
    return raw


def settings() -> Settings:
    """The `ASSAY_*` settings of the current environment (InputError for a bad value): built once
    for each set of `ASSAY_*` values seen (graders ask for them on every run)."""
    return _settings_of(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("ASSAY_"))))


@functools.lru_cache(maxsize=8)
def _settings_of(assay_env: tuple[tuple[str, str], ...]) -> Settings:
    env = dict(assay_env)
    return Settings(
        config=Path((env.get("ASSAY_CONFIG") or "").strip() or "assay.toml"),
        store=(env.get("ASSAY_STORE") or "").strip() or None,
        gateway_model=(env.get("ASSAY_GATEWAY_MODEL") or "").strip() or None,
        grade_timeout_s=_seconds("ASSAY_GRADE_TIMEOUT_S", DEFAULTS.grade_timeout_s),
        check_timeout_s=_seconds("ASSAY_CHECK_TIMEOUT_S", DEFAULTS.check_timeout_s),
        predicate_timeout_s=_seconds("ASSAY_PREDICATE_TIMEOUT_S", DEFAULTS.predicate_timeout_s),
        darebench_cells=(env.get("ASSAY_DAREBENCH_CELLS") or "table1").strip().lower() or "table1",
        workspace_quota_bytes=_count("ASSAY_WORKSPACE_QUOTA_BYTES", WORKSPACE_QUOTA_BYTES,
                                     minimum=MIN_WORKSPACE_QUOTA_BYTES, zero_ok=True),
        copy_max_files=_count("ASSAY_COPY_MAX_FILES", COPY_MAX_FILES, minimum=1),
        copy_max_depth=_count("ASSAY_COPY_MAX_DEPTH", COPY_MAX_DEPTH, minimum=1),
        brave_url=_url("ASSAY_BRAVE_URL"),
        web_token=(env.get("ASSAY_TOKEN") or "").strip() or None,
        lease_ttl_s=_seconds("ASSAY_LEASE_TTL_S", LEASE_TTL_S),
    )


def config_path() -> Path:
    return settings().config


def load_config(path: Path | None = None) -> Config:
    path = path or config_path()
    if not path.is_file():
        return Config()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(path, None, f"not UTF-8 text (byte {e.start}): TOML is UTF-8") from None
    except OSError as e:
        raise InputError(path, None, f"cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(path, None, f"does not parse as TOML: {e}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise InputError(path, None, "does not parse as TOML: arrays or inline tables nested too deep") from None
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise InputError(path, loc, msg) from None


def store_url(flag: str | None = None, config: Config | None = None, *, cwd: Path | None = None) -> str:
    """The store: `--store`, else $ASSAY_STORE, else assay.toml's `store`, else
    `sqlite:///<cwd>/.assay/assay.db`. A plain path (no `://`) is a SQLite file."""
    url = flag or settings().store or (config.store if config is not None else None)
    if not url:
        base = (cwd or Path.cwd()).resolve()
        return f"sqlite:///{(base / '.assay' / 'assay.db').as_posix()}"
    if "://" not in url and not url.startswith("sqlite:"):
        return f"sqlite:///{Path(url).expanduser().resolve().as_posix()}"
    return url
