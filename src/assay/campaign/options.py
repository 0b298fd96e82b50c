"""The options of a campaign, one model for every way in: `assay run`, the library
(`assay.run_campaign`), the planner, admission anchors and the web app's human play.

Defaults come from `assay.config.DEFAULTS` (the one place they are written). `check()`
refuses bad values with the flag's name (exit 2); `result_options()` is everything that can
change a result, hashed into every run key.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from assay.config import DEFAULTS
from assay.errors import InputError
from assay.task.model import LEVELS

__all__ = ["BACKENDS", "JUDGE_MODES", "ROUTINGS", "SCREEN_MODES", "SEARCH_MODES", "RunOptions"]

BACKENDS = ("local", "ray")

JUDGE_MODES = ("batched", "per-item")
SCREEN_MODES = ("on", "off")
SEARCH_MODES = ("off", "native", "local", "brave")
ROUTINGS = ("regex", "lexical", "embedding", "llm")
DEFAULT_AGENTS = ("noop", "literal", "reference")


class RunOptions(BaseModel):
    """What to run and how: SPEC.md `assay run`, field for flag."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    paths: list[Path] = Field(default_factory=list)
    agents: list[str] = Field(default_factory=lambda: list(DEFAULT_AGENTS))
    level: str | None = None  # None = default (scenarios L3), "all", or "L0".."L3"
    epochs: int = DEFAULTS.epochs
    concurrency: int = DEFAULTS.concurrency
    campaign: str = DEFAULTS.campaign
    store: str | None = None
    create_store: bool = False  # make a SQLite store's missing folder (--create)
    judges: list[str] = Field(default_factory=list)
    judge_mode: Literal["batched", "per-item"] | str = "batched"
    judge_repeats: int = 1
    # The audit's injection screen: one more call to the first judge per judged run with a positive score.
    injection_screen: Literal["on", "off"] | str = "on"
    values: Path | None = None
    task_ids: list[str] = Field(default_factory=list)
    limit: int | None = None  # the first N tasks of each path, in discovery order (--limit)
    tasks_from: Path | None = None  # a suite manifest (`assay curate --out`); its `tasks` join task_ids
    max_turns: int = DEFAULTS.max_turns
    max_minutes: float = DEFAULTS.max_minutes
    max_usd: float = DEFAULTS.max_usd
    # Not in result_options(): it decides which runs start, not what a run scores.
    max_campaign_usd: float | None = None  # stop starting runs once the campaign's spend reaches it
    response_cache: bool = False  # agents' model replies kept in the store under the full request's hash
    search: str = "off"
    unsafe_no_sandbox: bool = False
    skip_invalid: bool = False  # bad task files are listed and left out instead of refusing the command
    # Not in result_options(): run keys void MAX_VOID_ATTEMPTS times (stored as failed) are run again.
    retry_void: bool = False
    gateway_model: str | None = None  # model behind scenarios' company LLM gateway; None: $ASSAY_GATEWAY_MODEL
    routing: str | None = None  # stakeholder topic routing override; None: each scenario's own matcher
    router_model: str | None = None  # model for `llm` routing and gates
    # Where runs execute; not in result_options(): a run key is the same on either backend.
    backend: str = "local"  # local: this process's asyncio scheduler; ray: Ray tasks (the `ray` extra)
    ray_address: str | None = None  # None with --backend ray: a private local Ray instance
    # Stopping on evidence (campaign/rounds.py); not in result_options(): they decide which runs
    # start, not what a run scores.
    until_ci: float | None = None  # stop once every agent's interval, per kind, has this half-width
    until_decided: bool = False  # two agents: stop once the paired test decides
    alpha: float | None = None  # error rate of the intervals and the test; None: ALPHA (0.05)
    margin: float | None = None  # --until-decided: "equivalent" once the difference is inside (-D, D)
    max_epochs: int | None = None  # rounds of epochs at most; None: DEFAULT_MAX_EPOCHS
    pool: bool = False  # rounds draw tasks at random without replacement instead of adding epochs
    seed: int | None = None  # --pool's order; None: 0
    round_size: int | None = None  # --pool: tasks drawn per round; None: DEFAULT_ROUND_SIZE
    detect: float | None = None  # --dry-run: pairs and dollars to detect this difference

    def check(self) -> None:
        """Refuse bad values up front, naming the flag (InputError: exit 2, nothing run)."""
        for flag, count in (("--concurrency", self.concurrency), ("--epochs", self.epochs),
                            ("--judge-repeats", self.judge_repeats), ("--limit", self.limit)):
            if count is not None and count < 1:
                raise InputError(None, flag, "must be at least 1")
        if self.level is not None and self.level != "all" and self.level not in LEVELS:
            raise InputError(None, "--level", f"unknown level {self.level!r} (L0, L1, L2, L3 or all)")
        self._check_judging()
        if self.search not in SEARCH_MODES:
            raise InputError(None, "--search", f"{self.search!r} is not {', '.join(SEARCH_MODES[:-1])} or "
                                               f"{SEARCH_MODES[-1]}")
        for name in ("max_turns", "max_minutes", "max_usd"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise InputError(None, "--" + name.replace("_", "-"), "must be a positive, finite number")
        if not self.campaign.strip():
            raise InputError(None, "--campaign", "empty campaign name")
        if self.routing is not None and self.routing not in ROUTINGS:
            raise InputError(None, "--routing", f"{self.routing!r} is not one of {', '.join(ROUTINGS)}")
        if self.routing == "llm" and not self.router_model:
            raise InputError(None, "--router-model", "--routing llm needs --router-model SPEC")
        self._check_backend()
        if self.max_campaign_usd is not None and (not math.isfinite(self.max_campaign_usd)
                                                  or self.max_campaign_usd <= 0):
            raise InputError(None, "--max-campaign-usd", "must be a positive, finite number")
        self._check_rounds()
        seen: set[str] = set()
        for spec in self.agents:
            if spec in seen:
                raise InputError(None, "--agent", f"agent {spec!r} given twice")
            seen.add(spec)

    @property
    def stops_on_evidence(self) -> bool:
        """Whether the campaign runs in rounds (`--until-ci` or `--until-decided`)."""
        return self.until_ci is not None or self.until_decided

    def _check_rounds(self) -> None:  # noqa: C901 - one refusal per bad combination, each with its flag
        """Bad combinations of the stopping flags: exit 2 naming the flag."""
        if self.until_ci is not None and self.until_decided:
            raise InputError(None, "--until-ci", "--until-ci and --until-decided are two stopping rules: pass one")
        if self.until_ci is not None and not (math.isfinite(self.until_ci) and 0 < self.until_ci < 0.5):
            raise InputError(None, "--until-ci", "the half-width must be a number between 0 and 0.5")
        if self.until_decided and len(self.agents) != 2:
            raise InputError(None, "--until-decided", f"compares two agents: pass --agent A --agent B "
                                                      f"(got {len(self.agents)})")
        rule = self.stops_on_evidence
        for flag, value in (("--alpha", self.alpha), ("--max-epochs", self.max_epochs), ("--pool", self.pool or None),
                            ("--seed", self.seed), ("--round-size", self.round_size)):
            if value is not None and not rule:
                raise InputError(None, flag, "only applies to a campaign that stops on evidence: pass --until-ci W "
                                             "or --until-decided")
        if self.margin is not None and not self.until_decided:
            raise InputError(None, "--margin", "is the equivalence margin of --until-decided")
        if self.margin is not None and not (math.isfinite(self.margin) and 0 < self.margin < 1):
            raise InputError(None, "--margin", "must be a number between 0 and 1")
        if self.alpha is not None and not (math.isfinite(self.alpha) and 0 < self.alpha <= 0.5):
            raise InputError(None, "--alpha", "must be a number in (0, 0.5]")
        if self.pool:
            if self.max_epochs is not None:
                raise InputError(None, "--max-epochs", "with --pool each round draws new tasks (each run --epochs "
                                                       "times) and the pool's end stops it: drop --max-epochs")
            if self.round_size is not None and self.round_size < 1:
                raise InputError(None, "--round-size", "must be at least 1")
        else:
            for flag, value in (("--seed", self.seed), ("--round-size", self.round_size)):
                if value is not None:
                    raise InputError(None, flag, "needs --pool (without it, every round is an epoch of every task)")
            if rule and self.epochs not in (DEFAULTS.epochs, self.max_epochs):
                raise InputError(None, "--epochs", "a campaign that stops on evidence adds one epoch a round: "
                                                   "use --max-epochs N (or --pool, where --epochs is per task)")
            if self.max_epochs is not None and self.max_epochs < 1:
                raise InputError(None, "--max-epochs", "must be at least 1")
        if self.detect is not None and not (math.isfinite(self.detect) and 0 < self.detect < 1):
            raise InputError(None, "--detect", "must be a difference between 0 and 1")

    def _check_judging(self) -> None:
        if self.judge_mode not in JUDGE_MODES:
            raise InputError(None, "--judge-mode", f"{self.judge_mode!r} is not batched or per-item")
        if self.injection_screen not in SCREEN_MODES:
            raise InputError(None, "--injection-screen", f"{self.injection_screen!r} is not on or off")

    def _check_backend(self) -> None:
        if self.backend not in BACKENDS:
            raise InputError(None, "--backend", f"{self.backend!r} is not local or ray")
        if self.ray_address is not None and self.backend != "ray":
            raise InputError(None, "--ray-address", "needs --backend ray")
        if self.ray_address is not None and not self.ray_address.strip():
            raise InputError(None, "--ray-address", "empty address (HOST:PORT, ray://HOST:PORT or auto)")
        if self.backend == "ray" and importlib.util.find_spec("ray") is None:
            raise InputError(None, "--backend", "--backend ray needs Ray: install the ray extra "
                                                "(pip install -e '.[ray]')")

    def result_options(self) -> dict[str, Any]:
        """Everything that can change a result; hashed into every run key."""
        opts: dict[str, Any] = {
            # In the order given: the first judge is also the contract judge and the meta-judge.
            "judges": list(self.judges), "judge_mode": self.judge_mode, "judge_repeats": self.judge_repeats,
            "max_turns": self.max_turns, "max_minutes": self.max_minutes, "max_usd": self.max_usd,
            "search": self.search, "sandbox": not self.unsafe_no_sandbox,
        }
        if self.judges:  # the screen is a judge call: campaigns without a judge keep their run keys
            opts["injection_screen"] = self.injection_screen
        # Only when set, so campaigns that do not use them keep their run keys.
        for name in ("gateway_model", "routing", "router_model"):
            if getattr(self, name):
                opts[name] = getattr(self, name)
        return opts
