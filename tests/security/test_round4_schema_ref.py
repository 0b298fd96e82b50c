"""Round 4 red team, classes 3 and 5 (task-supplied patterns and schemas run within bounds;
grading reads nothing of the host): a downloaded task's JSON Schema `$ref` to a host file.

jsonschema (4.18 and later) still retrieves a `$ref` it does not know with `urlopen`, with a
DeprecationWarning, so `file://` and `http://127.0.0.1` work. The `json` predicate runs in
the harness's worker process, as root, outside every sandbox."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import assay, report, write_task

pytestmark = pytest.mark.slow

SECRET = "7355608"


def test_a_schema_ref_to_a_root_only_host_file_is_refused_and_never_read(tmp_path: Path) -> None:
    """The task's schema is `{"$ref": "file:///.../secret.json"}`, a root-only host file
    (mode 0600) holding `{"enum": [SECRET]}`. A correct harness refuses the `$ref` at
    `assay validate` (exit 2, the field named) and never opens the file; here the file's
    content lands in the stored predicate reason."""
    os.chmod(tmp_path, 0o711)
    secret = tmp_path / "host" / "secret.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"enum": [int(SECRET)]}))
    secret.chmod(0o600)
    folder = write_task(tmp_path / "tasks" / "ref", {
        "title": "a number", "domain": "test", "execution": "multi-step-with-tools",
        "prompt": "Write a number into answer.json.",
        "contract": [{"path": "answer.json", "predicate": "json", "schema": {"$ref": secret.as_uri()}}],
        "reference": {"artifacts": "reference"},
    }, {"reference/answer.json": "5\n"})
    v = assay("validate", str(folder), cwd=tmp_path)
    assert "Traceback" not in v.stdout + v.stderr
    if v.returncode == 2:  # refused, as it should be: the field is named
        assert "contract[0]" in v.stderr and "$ref" in v.stderr, v.stderr
        return
    r = assay("run", str(folder), "--agent", "reference", "-q", cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    stored = json.dumps(report(tmp_path)["runs"])
    assert SECRET not in stored, "the root-only host file's content is in the stored grade"
    pytest.fail("a schema $ref that leaves the schema was accepted at validate")
