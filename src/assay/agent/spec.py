"""Agent specs (`--agent`): from a string to something that can run a task.

Model specs are resolved by `assay.llm.resolve` (the one resolver every model user shares);
a model's client is created once per spec and shared by every run of the campaign.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from assay.agent.base import Agent
from assay.agent.loop import ModelAgent
from assay.agent.policies import NoopAgent, PolicyAgent, ScriptAgent, load_script
from assay.config import Config
from assay.errors import InputError
from assay.llm.providers import provider_names
from assay.llm.resolve import Model, is_model_spec, resolve_model
from assay.task.hashing import file_digest
from assay.task.model import Task

POLICY_SPEC = re.compile(r"^(reference|literal|(shortcut|bypass|alternate|probe):[A-Za-z0-9_.\-]+)$")
AgentKind = Literal["noop", "policy", "script", "model", "human"]


class AgentFactory:
    """A resolved `--agent` spec; `for_task` gives the agent for one task (see `skip_reason`)."""

    def __init__(self, spec: str, config: Config, *, require_key: bool = True) -> None:
        self.spec = spec
        self.kind: AgentKind
        self.model: Model | None = None
        self.script_path: Path | None = None
        if spec == "noop":
            self.kind = "noop"
        elif POLICY_SPEC.match(spec):
            self.kind = "policy"
        elif spec.startswith("script:"):
            self.kind = "script"
            self.script_path = Path(spec.removeprefix("script:"))
            load_script(self.script_path)  # refuse a bad script up front
        elif spec.startswith("human:"):
            raise InputError(None, "--agent", f"{spec!r}: people work through the web app (assay serve), not assay run")
        elif is_model_spec(spec, config):
            self.kind = "model"
            self.model = Model(resolve_model(spec, config, require_key=require_key))
        else:
            raise InputError(None, "--agent", f"unknown agent spec {spec!r} (noop, reference, literal, "
                                              "shortcut:NAME, bypass:NAME, alternate:NAME, probe:NAME, script:PATH, "
                                              f"{'/MODEL, '.join(provider_names())}/MODEL, or a model alias from assay.toml)")

    def options(self) -> dict[str, object]:
        """What about this agent can change a result (goes into the options hash)."""
        if self.model is not None:
            return self.model.spec.result_options()
        if self.script_path is not None:
            return {"script_sha": file_digest(self.script_path)}
        return {}

    def skip_reason(self, task: Task) -> str | None:
        if self.kind == "policy" and self.spec not in task.policies:
            what = "reference" if self.spec == "reference" else self.spec
            return f"task {task.id} has no {what} policy"
        return None

    def for_task(self, task: Task) -> Agent:
        if self.kind == "noop":
            return NoopAgent()
        if self.kind == "policy":
            return PolicyAgent(self.spec, task.policies[self.spec])
        if self.script_path is not None:
            return ScriptAgent(self.spec, self.script_path)
        assert self.model is not None
        return ModelAgent(self.spec, self.model)

    async def aclose(self) -> None:
        if self.model is not None:
            await self.model.aclose()
