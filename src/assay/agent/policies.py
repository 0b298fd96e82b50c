"""Deterministic agents: no-op, a task's own policies, and scripted tool-call replays.

They go through the same workspace, tools and sandbox as a model, which is how tests and
task authors exercise the harness end to end.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from assay.agent.base import Agent, AgentEnv, AgentOutcome
from assay.errors import InputError
from assay.fs.copying import copy_tree
from assay.llm.messages import ToolCall
from assay.task.formats.jsonio import loads_jsonl_line
from assay.task.model import PolicySpec

POLICY_MOUNT = "/run/assay/policy"


class NoopAgent(Agent):
    spec = "noop"

    async def run(self, env: AgentEnv) -> AgentOutcome:
        env.transcript.harness("noop: submitted without doing anything")
        return AgentOutcome(end_reason="finished", final_message="")


class PolicyAgent(Agent):
    """Runs a task's reference/literal/shortcut/bypass/alternate policy."""

    def __init__(self, spec: str, policy: PolicySpec) -> None:
        self.spec = spec
        self.policy = policy

    def _mount_root(self) -> Path | None:
        """The folder bound at POLICY_MOUNT: the policy's `root` (a whole case folder) or the script's own."""
        if self.policy.script is None:
            return None
        return self.policy.root if self.policy.root is not None else self.policy.script.parent

    def binds(self) -> list[tuple[Path, str]]:
        root = self._mount_root()
        return [(root, POLICY_MOUNT)] if root is not None else []

    async def run(self, env: AgentEnv) -> AgentOutcome:
        out = AgentOutcome(end_reason="finished")
        pol = self.policy
        if pol.artifacts is not None:
            if env.workspace is None:
                raise InputError(pol.artifacts, self.spec, "artifacts need a task workspace")
            copied = await asyncio.to_thread(copy_tree, pol.artifacts, env.workspace, merge=True)
            env.transcript.harness(f"{self.spec}: copied artifacts", files=copied.copied)
            if env.sandbox is not None:
                env.sandbox.prepare()
        if pol.script is not None:
            if env.sandbox is None or env.workspace is None:
                raise InputError(pol.script, self.spec, "a policy script needs a workspace and a sandbox")
            root = self._mount_root()
            assert root is not None
            rel = Path(pol.script).resolve().relative_to(Path(root).resolve()).as_posix()
            inside = f"{POLICY_MOUNT}/{rel}"
            cmd = ["python3", inside, env.sandbox.inside_root] if env.sandbox.isolated else \
                ["python3", str(pol.script), str(env.workspace)]
            env.transcript.tool_call("policy", name="run_command", arguments={"command": " ".join(cmd)})
            r = await env.sandbox.run(cmd, timeout_s=min(1800.0, env.limits.max_minutes * 60))
            env.transcript.tool_result("policy", name="run_command",
                                output=f"[exit code {r.exit_code}]{' [timed out]' if r.timed_out else ''}\n{r.output}")
            if r.timed_out:
                out.end_reason = "max_time"
        if pol.answer is not None:
            out.final_message = pol.answer
            env.transcript.assistant(pol.answer)
        return out


class ScriptLine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: str | None = None
    args: dict[str, Any] = {}
    say: str | None = None


def load_script(path: Path) -> list[ScriptLine]:
    if not path.is_file():
        raise InputError(path, None, "script file not found")
    lines: list[ScriptLine] = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        obj = loads_jsonl_line(raw, path, n)  # depth and digits bounded: exit 2 naming the line, never a traceback
        try:
            line = ScriptLine.model_validate(obj)
        except ValidationError as e:
            loc = ".".join(str(x) for x in e.errors()[0]["loc"])
            raise InputError(path, loc or None, e.errors()[0]["msg"], line=n) from None
        if (line.tool is None) == (line.say is None):
            raise InputError(path, None, "each line needs exactly one of 'tool' or 'say'", line=n)
        lines.append(line)
    return lines


class ScriptAgent(Agent):
    """Replays tool calls from a JSONL file, one per turn, through the real tools."""

    def __init__(self, spec: str, path: Path) -> None:
        self.spec = spec
        self.lines = load_script(path)

    async def run(self, env: AgentEnv) -> AgentOutcome:
        out = AgentOutcome(end_reason="finished")
        env.transcript.user(env.prompt)
        for i, line in enumerate(self.lines):
            if out.stop_at_limit(env):  # a script spends nothing: turns and minutes stop it
                break
            out.turns += 1
            if line.say is not None:
                out.final_message = line.say
                env.transcript.assistant(line.say)
                break
            call = ToolCall(id=f"s{i}", name=line.tool or "", arguments=line.args)
            env.transcript.assistant("", tool_calls=[call.model_dump(exclude_none=True)])
            env.transcript.tool_call(call.id, name=call.name, arguments=call.arguments)
            result = await env.tools.execute(call)
            env.transcript.tool_result(call.id, name=call.name, output=result)
        return out
