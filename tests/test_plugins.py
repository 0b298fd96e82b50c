"""The provider and tool registries and their entry points (`assay.plugins`), in process:
plugins are real installed distributions (a dist-info folder on sys.path, as pip leaves one),
the demo plugin of tests/plugins among them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from assay import plugins
from assay.agent import tools
from assay.agent.tools import Tool, ToolBox, check_task_tools, get_tool, tool_names
from assay.config import Config, ModelAlias
from assay.errors import InputError
from assay.llm import providers
from assay.llm.clients.base import classify
from assay.llm.messages import ToolCall
from assay.llm.resolve import resolve_model
from assay.plugins import PluginError
from assay.task.discover import discover
from assay.task.model import TOOL_NAMES
from tests.helpers import REPO, write_task

DEMO_SRC = REPO / "tests" / "plugins" / "assay_plugin_demo" / "src"
Install = Callable[..., Path]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Install:
    """`install(dist, entry_points, modules)`: a distribution on sys.path, its entry points read
    afresh; the registries go back to the built-ins after the test."""
    monkeypatch.setattr(providers.PROVIDERS, "items", dict(providers.BUILTIN_PROVIDERS))
    monkeypatch.setattr(tools.TOOLS, "items", dict(tools.BUILTIN_TOOLS))
    plugins._entry_points.cache_clear()

    def make(dist: str, entry_points: str, modules: dict[str, str] | None = None, path: Path | None = None) -> Path:
        site = tmp_path / f"site-{dist}"
        info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(entry_points)
        for rel, text in (modules or {}).items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
        monkeypatch.syspath_prepend(str(site))
        if path is not None:
            monkeypatch.syspath_prepend(str(path))
        plugins._entry_points.cache_clear()
        return site

    yield make  # type: ignore[misc]
    plugins._entry_points.cache_clear()


def _demo(install: Install) -> None:
    install("assay-plugin-demo", "[assay.providers]\ndemowire = assay_plugin_demo.provider:PROVIDER\n"
                                 "[assay.tools]\ncalculator = assay_plugin_demo.calculator:CALCULATOR\n", path=DEMO_SRC)


def test_the_builtins_are_registered_through_the_registries() -> None:
    assert providers.provider_names()[:2] == ["openai", "anthropic"]
    # The defaults every format offers are the five workspace tools (web_search comes with a
    # task's search): a new built-in tool outside them needs a place at the task layer where a
    # task file may name it, since adding it to TOOL_NAMES would change the hash of every task.
    assert set(tools.BUILTIN_TOOLS) == {*TOOL_NAMES, "web_search"}
    assert TOOL_NAMES == ("run_command", "read_file", "write_file", "edit_file", "list_files")
    assert resolve_model("openai/gpt-4.1", require_key=False).provider == "openai"


def test_a_plugin_provider_is_a_model_spec_and_names_its_own_errors(install: Install,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _demo(install)
    monkeypatch.delenv("DEMOWIRE_API_KEY", raising=False)
    monkeypatch.setenv("DEMOWIRE_BASE_URL", "http://127.0.0.1:9")
    from assay_plugin_demo.provider import DemoWireError

    fault = DemoWireError("HTTP 503: busy", 503)
    assert classify(fault) is None  # not loaded yet: none of its errors can have been raised
    spec = resolve_model("demowire/echo-1")  # a loopback endpoint needs no key
    assert (spec.provider, spec.model, spec.name) == ("demowire", "echo-1", "demowire/echo-1")
    assert "demowire" in providers.provider_names()
    got = classify(fault)
    assert got is not None and got.retriable and got.status == 503
    told = classify(DemoWireError("HTTP 401: no", 401))
    assert told is not None and not told.retriable
    assert classify(RuntimeError("mine")) is None  # a provider names its own errors only


def test_a_plugin_provider_with_a_key_env_refuses_a_missing_key(install: Install,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _demo(install)
    monkeypatch.delenv("DEMOWIRE_API_KEY", raising=False)
    monkeypatch.setenv("DEMOWIRE_BASE_URL", "https://demowire.example/v1")
    with pytest.raises(InputError) as e:
        resolve_model("demowire/echo-1")
    assert e.value.field == "--agent"
    assert e.value.reason == "DEMOWIRE_API_KEY is not set (or point DEMOWIRE_BASE_URL at a local server)"


def test_a_plugin_that_fails_to_load_is_an_input_error_naming_its_package(install: Install) -> None:
    install("broken-plugin", "[assay.providers]\nbroken = broken_mod:PROVIDER\n[assay.tools]\nbad = broken_mod:X\n",
            {"broken_mod.py": "raise RuntimeError('the plugin is broken')\n"})
    with pytest.raises(PluginError) as e:
        resolve_model("broken/x", require_key=False)
    assert e.value.field == "--agent"
    assert e.value.reason == "plugin 'broken' (assay.providers entry point 'broken_mod:PROVIDER' of broken-plugin 0.1) failed to " \
           "load: RuntimeError: the plugin is broken"
    with pytest.raises(PluginError, match="broken-plugin 0.1"):
        get_tool("bad", "tools[0]")
    config = Config(models={"b": ModelAlias(provider="broken", model="x", base_url="http://127.0.0.1:9")})
    with pytest.raises(PluginError) as e:  # from an alias: the file and field are assay.toml's
        resolve_model("b", config)
    assert (e.value.file, e.value.field) == ("assay.toml", "models.b.provider")


def test_a_plugin_of_the_wrong_type_is_refused(install: Install) -> None:
    install("odd-plugin", "[assay.tools]\nodd = odd_mod:X\nmisnamed = odd_mod:T\n[assay.providers]\nodd = odd_mod:X\n",
            {"odd_mod.py": "from assay.agent.tools import Tool, TOOL_SPECS\n"
                           "X = 42\nT = Tool(TOOL_SPECS['list_files'], lambda a, box: 'x')\n"})
    with pytest.raises(PluginError) as e:
        get_tool("odd", "tools[1]")
    assert e.value.field == "tools[1]" and e.value.reason.endswith("is a int, not an assay.agent.tools.Tool")
    with pytest.raises(PluginError, match="its Tool is named 'list_files', not 'misnamed'"):
        get_tool("misnamed")
    with pytest.raises(PluginError, match="is a int, not an assay.llm.providers.Provider"):
        resolve_model("odd/x", require_key=False)


async def test_a_plugin_tool_runs_in_the_toolbox_with_its_schema_checked(install: Install, tmp_path: Path) -> None:
    _demo(install)
    assert "calculator" in tool_names()
    box = ToolBox(tmp_path, None, ["calculator", "write_file"])
    assert [s.name for s in box.specs()] == ["calculator", "write_file"]
    assert isinstance(box.tools["calculator"], Tool)

    async def run(**args: object) -> str:
        return (await box.run(ToolCall(id="t", name="calculator", arguments=args))).text

    assert await run(expression="1234 * 5678 + 9") == "7006661"
    assert await run(expression="__import__('os').system('id')") == \
        "error: only numbers and + - * / // % ** are allowed, not Call"
    assert await run(expression="1/0") == "error: division by zero"
    assert await run(expression=7) == "error: argument 'expression' must be a string, not an integer (7)"
    assert await run(expression="1", extra=1) == "error: unknown argument(s) 'extra'; this tool takes expression"


def test_a_task_names_a_plugin_tool_and_todays_hashes_stay(install: Install, tmp_path: Path) -> None:
    spec = {"title": "calc", "domain": "test", "execution": "multi-step", "tools": ["calculator"],
            "prompt": "Compute.", "contract": [{"path": "a.txt", "predicate": "regex", "pattern": "1"}]}
    task = write_task(tmp_path / "tasks" / "calc", spec)
    with pytest.raises(InputError) as e:
        discover([task])
    assert (Path(str(e.value.file)).name, e.value.field) == ("task.yaml", "tools[0]")
    assert e.value.reason == ("unknown tool 'calculator' (known: run_command, read_file, write_file, edit_file, "
                              "list_files)")
    _demo(install)
    (found,) = discover([task])
    assert found.tools == ["calculator"]
    check_task_tools([found])  # loads it
    starter = {t.id: t.content_hash for t in discover([REPO / "suites" / "starter" / "contract"])}
    assert starter["text-mt-log-triage"] == "fbca9d2bd75d3517"  # a registered tool changes no other task's hash
    assert starter["text-ms-policy-summary"] == "8a8090d2d5ade61d"


def test_check_task_tools_names_the_task_file(install: Install, tmp_path: Path) -> None:
    install("broken-tool", "[assay.tools]\nbad = broken_tool_mod:X\n",
            {"broken_tool_mod.py": "import no_such_module_anywhere\n"})
    task = write_task(tmp_path / "tasks" / "t", {"title": "t", "domain": "test", "execution": "multi-step",
                                                  "tools": ["bad"], "prompt": "x",
                                                  "contract": [{"path": "a", "predicate": "regex", "pattern": "1"}]})
    (found,) = discover([task])
    with pytest.raises(PluginError) as e:
        check_task_tools([found])
    assert e.value.file == found.origin and e.value.field == "tools[0]"
    assert "ModuleNotFoundError" in e.value.reason and "broken-tool 0.1" in e.value.reason
    assert json.dumps(e.value.reason)  # one line of text for the CLI


async def test_a_tool_that_crashes_is_its_fault_not_the_agents(install: Install, tmp_path: Path) -> None:
    """A ValueError is the agent's to read; any other exception leaves the tool box (the runner
    makes the run void, harness_error)."""
    from assay.llm.messages import ToolSpec

    def run(arguments: dict[str, object], box: ToolBox) -> str:
        if arguments.get("how") == "bad":
            raise ValueError("a bad argument")
        raise RuntimeError("the tool's own bug")

    spec = ToolSpec(name="crashy", description="d",
                    parameters={"type": "object", "properties": {"how": {"type": "string"}}})
    tools.register_tool(Tool(spec, run))
    box = ToolBox(tmp_path, None, ["crashy"])
    assert (await box.run(ToolCall(id="a", name="crashy", arguments={"how": "bad"}))).text == "error: a bad argument"
    with pytest.raises(RuntimeError, match="the tool's own bug"):
        await box.run(ToolCall(id="b", name="crashy", arguments={}))
