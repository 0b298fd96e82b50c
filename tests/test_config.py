"""assay.config: ASSAY_* settings (bad values name the variable), assay.toml, the store URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.config import DEFAULTS, Config, ModelAlias, load_config, settings, store_url
from assay.errors import InputError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import os

    for name in [k for k in os.environ if k.startswith("ASSAY_")]:
        monkeypatch.delenv(name)
    yield


# --------------------------------------------------------------------------- settings


def test_settings_defaults() -> None:
    s = settings()
    assert s.config == Path("assay.toml") and s.store is None and s.gateway_model is None
    assert (s.grade_timeout_s, s.check_timeout_s) == (DEFAULTS.grade_timeout_s, DEFAULTS.check_timeout_s)
    assert s.darebench_cells == "table1"


def test_settings_read_the_environment_when_called(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_CONFIG", "/etc/assay/team.toml")
    monkeypatch.setenv("ASSAY_STORE", "postgresql+psycopg://u@h/db")
    monkeypatch.setenv("ASSAY_GATEWAY_MODEL", "  openai/gpt-4.1-mini  ")
    monkeypatch.setenv("ASSAY_GRADE_TIMEOUT_S", " 12.5 ")
    monkeypatch.setenv("ASSAY_CHECK_TIMEOUT_S", "3")
    monkeypatch.setenv("ASSAY_DAREBENCH_CELLS", " Table9 ")
    s = settings()
    assert s.config == Path("/etc/assay/team.toml") and s.store == "postgresql+psycopg://u@h/db"
    assert s.gateway_model == "openai/gpt-4.1-mini"
    assert (s.grade_timeout_s, s.check_timeout_s) == (12.5, 3.0)
    assert s.darebench_cells == "table9"
    monkeypatch.setenv("ASSAY_CHECK_TIMEOUT_S", "7")
    assert settings().check_timeout_s == 7.0


@pytest.mark.parametrize("name", ["ASSAY_GRADE_TIMEOUT_S", "ASSAY_CHECK_TIMEOUT_S"])
@pytest.mark.parametrize(("raw", "reason"), [
    ("soon", "'soon' is not a number of seconds"),
    ("10s", "'10s' is not a number of seconds"),
    ("0", "'0' must be a positive, finite number of seconds"),
    ("-5", "'-5' must be a positive, finite number of seconds"),
    ("inf", "'inf' must be a positive, finite number of seconds"),
    ("nan", "'nan' must be a positive, finite number of seconds"),
])
def test_bad_seconds_name_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, raw: str, reason: str) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(InputError) as e:
        settings()
    assert e.value.field == name and e.value.reason == reason
    assert e.value.message == f"<input>: field '{name}': {reason}"


@pytest.mark.parametrize("raw", ["", "   "])
def test_empty_values_mean_the_default(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    for name in ("ASSAY_GATEWAY_MODEL", "ASSAY_GRADE_TIMEOUT_S", "ASSAY_CHECK_TIMEOUT_S", "ASSAY_DAREBENCH_CELLS"):
        monkeypatch.setenv(name, raw)
    s = settings()
    assert s.gateway_model is None and s.grade_timeout_s == DEFAULTS.grade_timeout_s
    assert s.check_timeout_s == DEFAULTS.check_timeout_s and s.darebench_cells == "table1"


def test_empty_store_and_config_variables_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_STORE", "")
    monkeypatch.setenv("ASSAY_CONFIG", "")
    assert (settings().store, settings().config) == (None, Path("assay.toml"))


def test_blank_store_and_config_variables_mean_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As every other ASSAY_* variable: whitespace is unset, not a SQLite file (or a config
    file) named "   " in the current folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASSAY_STORE", "   ")
    monkeypatch.setenv("ASSAY_CONFIG", "   ")
    assert (settings().store, settings().config) == (None, Path("assay.toml"))
    assert store_url() == f"sqlite:///{tmp_path.resolve()}/.assay/assay.db"


# --------------------------------------------------------------------------- store_url


def test_store_url_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = Config(store="postgresql+psycopg://cfg@h/db")
    monkeypatch.setenv("ASSAY_STORE", "postgresql+psycopg://env@h/db")
    assert store_url("postgresql+psycopg://flag@h/db", cfg) == "postgresql+psycopg://flag@h/db"
    assert store_url(None, cfg) == "postgresql+psycopg://env@h/db"
    monkeypatch.delenv("ASSAY_STORE")
    assert store_url(None, cfg) == "postgresql+psycopg://cfg@h/db"
    assert store_url(None, Config(), cwd=tmp_path) == f"sqlite:///{tmp_path.resolve()}/.assay/assay.db"
    assert store_url(None, None, cwd=tmp_path) == f"sqlite:///{tmp_path.resolve()}/.assay/assay.db"


def test_store_url_default_is_under_the_current_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert store_url() == f"sqlite:///{tmp_path.resolve()}/.assay/assay.db"


def test_plain_paths_are_sqlite_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert store_url("runs/a.db") == f"sqlite:///{tmp_path.resolve()}/runs/a.db"
    assert store_url("/data/x.db") == "sqlite:////data/x.db"
    assert store_url("~/y.db") == f"sqlite:///{tmp_path.resolve()}/home/y.db"
    assert store_url(None, Config(store="team.db")) == f"sqlite:///{tmp_path.resolve()}/team.db"
    monkeypatch.setenv("ASSAY_STORE", "env.db")
    assert store_url() == f"sqlite:///{tmp_path.resolve()}/env.db"


@pytest.mark.parametrize("url", ["sqlite:///rel.db", "sqlite:////abs/x.db", "sqlite://", "sqlite:///:memory:",
                                 "postgresql://u@h:5432/db", "postgresql+psycopg://u:p@h/db"])
def test_urls_pass_through(url: str) -> None:
    assert store_url(url) == url


# --------------------------------------------------------------------------- load_config


def test_load_config_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert load_config(tmp_path / "none.toml") == Config()


def test_load_config_reads_aliases_prices_and_store(tmp_path: Path) -> None:
    p = tmp_path / "assay.toml"
    p.write_text('store = "sqlite:///x.db"\n'
                 '[models.local]\nmodel = "qwen"\nbase_url = "http://127.0.0.1:8000/v1"\ntemperature = 0.2\n'
                 '[models.local.prices]\ninput = 0.1\noutput = 0.2\n'
                 '[prices."openai/gpt-4.1"]\ninput = 1.0\noutput = 4.0\n')
    cfg = load_config(p)
    assert cfg.store == "sqlite:///x.db"
    alias = cfg.models["local"]
    assert isinstance(alias, ModelAlias) and (alias.provider, alias.model, alias.temperature) == ("openai", "qwen", 0.2)
    assert alias.prices is not None and (alias.prices.input, alias.prices.output) == (0.1, 0.2)
    assert cfg.prices["openai/gpt-4.1"].output == 4.0


def test_load_config_uses_assay_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    p = tmp_path / "team.toml"
    p.write_text('store = "team.db"\n')
    monkeypatch.setenv("ASSAY_CONFIG", str(p))
    assert load_config().store == "team.db"


@pytest.mark.parametrize(("text", "field", "reason"), [
    ('[models.x]\nprovider = "openai"\n', "models.x.model", "Field required"),
    ('[models.x]\nmodel = "m"\ncolour = "red"\n', "models.x.colour", "unknown field"),
    ('stores = "x"\n', "stores", "unknown field"),
    ('[prices."openai/x"]\ninput = 1\n', "prices.openai/x.output", "Field required"),
    ('[models.x]\nmodel = "m"\ntemperature = "warm"\n', "models.x.temperature", "Input should be a valid number"),
])
def test_load_config_names_the_bad_field(tmp_path: Path, text: str, field: str, reason: str) -> None:
    p = tmp_path / "assay.toml"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_config(p)
    assert e.value.file == str(p) and e.value.field == field and e.value.reason.startswith(reason)


def test_load_config_refuses_bad_toml(tmp_path: Path) -> None:
    p = tmp_path / "assay.toml"
    p.write_text("[models.x\nmodel = 1\n")
    with pytest.raises(InputError) as e:
        load_config(p)
    assert e.value.file == str(p) and e.value.field is None
    assert e.value.reason.startswith("does not parse as TOML")


@pytest.mark.parametrize(("toml", "field"), [
    ('[models.m]\nmodel = "x"\n[models.m.prices]\ninput = nan\noutput = 1.0\n', "models.m.prices.input"),
    ('[models.m]\nmodel = "x"\ntimeout_s = -5\n', "models.m.timeout_s"),
    ('[models.m]\nmodel = "x"\nmax_retries = -3\n', "models.m.max_retries"),
    ('[prices.gpt]\ninput = -1.0\noutput = 1.0\n', "prices.gpt.input"),
])
def test_a_config_value_out_of_its_range_is_refused_naming_it(tmp_path: Path, toml: str, field: str) -> None:
    """A NaN or negative price, a negative timeout or retry count in assay.toml is exit 2 naming
    the field (a NaN price made every cost NaN; a negative timeout was taken)."""
    path = tmp_path / "assay.toml"
    path.write_text(toml)
    with pytest.raises(InputError) as e:
        load_config(path)
    assert e.value.field == field


@pytest.mark.parametrize("data", ["[models.m]\nmodel = 'x'\n".encode("utf-16"), b"store = '\xff\xfe'\n"])
def test_a_config_that_is_not_utf8_is_refused(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "assay.toml"
    path.write_bytes(data)
    with pytest.raises(InputError, match="not UTF-8"):
        load_config(path)
