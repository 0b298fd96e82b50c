"""Settings: model aliases and prices from `assay.toml`, the store URL from flags or env."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay.errors import InputError


class PriceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: float
    cached_input: float | None = None
    cache_write: float | None = None
    output: float


class ModelAlias(BaseModel):
    """`[models.ALIAS]` in assay.toml: any OpenAI-compatible or Anthropic endpoint."""

    model_config = ConfigDict(extra="forbid")
    provider: str = "openai"
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    prices: PriceConfig | None = None
    context: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_retries: int = 5
    retry_base_delay: float = 1.0
    timeout_s: float = 600.0


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: dict[str, ModelAlias] = Field(default_factory=dict)
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    store: str | None = None


def config_path() -> Path:
    return Path(os.environ.get("ASSAY_CONFIG", "assay.toml"))


def load_config(path: Path | None = None) -> Config:
    path = path or config_path()
    if not path.is_file():
        return Config()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise InputError(path, None, f"does not parse as TOML: {e}") from None
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise InputError(path, loc, msg) from None


def store_url(flag: str | None, config: Config | None = None) -> str:
    if flag:
        return flag
    if os.environ.get("ASSAY_STORE"):
        return os.environ["ASSAY_STORE"]
    if config is not None and config.store:
        return config.store
    return f"sqlite:///{(Path.cwd() / '.assay' / 'assay.db').as_posix()}"
