"""Error values that cross module boundaries.

`InputError` is the one the CLI turns into exit code 2: it always names the file, the
field and the reason, so a user can fix bad input without reading a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class InputError(Exception):
    """Bad user input: a task file, an option, an agent spec."""

    def __init__(self, file: str | Path | None, field: str | None, reason: str,
                 line: int | None = None, column: int | None = None) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        self.reason = reason
        self.line = line
        self.column = column
        super().__init__(self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its fields (a report's worker process sends its errors to the parent)."""
        return type(self), (self.file, self.field, self.reason, self.line, self.column)

    @property
    def message(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        if self.field:
            return f"{where}: field '{self.field}': {self.reason}"
        return f"{where}: {self.reason}"


class InvalidTasks(InputError):
    """Several task files are bad: each is named (file, field, reason), not only the first."""

    def __init__(self, errors: list[InputError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.file, first.field, first.reason, first.line, first.column)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.errors,)

    @property
    def message(self) -> str:
        if len(self.errors) == 1:
            return self.errors[0].message
        return f"{len(self.errors)} task files are invalid:\n" + "\n".join(f"  {e.message}" for e in self.errors)

    def rows(self) -> list[dict[str, str | int | None]]:
        """`skipped` rows of the report JSON: file, field, reason (and line, column)."""
        return [{"file": e.file, "field": e.field, "reason": e.reason, "line": e.line, "column": e.column}
                for e in self.errors]


class HarnessError(Exception):
    """A fault of the harness itself; makes a run void with end reason harness_error."""


class ProviderError(Exception):
    """A model provider failed after retries; makes a run void with end reason api_error.

    `context_overflow`: the provider refused the request as longer than the model's context
    (OpenAI's `context_length_exceeded`, Anthropic's "prompt is too long", HTTP 413): what
    asked may be able to send less (a judge cuts the answer shorter), where an outage, a
    timeout or a refused key leave nothing to change.

    `content_refused`: the provider refused to read what was sent (a content filter: OpenAI's
    `invalid_prompt`, Azure's `content_filter`). A judge refused so was sent what the agent
    wrote (the task's own text is judged on its reference too): its verdict is no credit, not
    a void run."""

    def __init__(self, reason: str, status: int | None = None, *, context_overflow: bool = False,
                 content_refused: bool = False) -> None:
        self.reason = reason
        self.status = status
        self.context_overflow = context_overflow
        self.content_refused = content_refused
        super().__init__(reason)


class GraderError(Exception):
    """Grading could not be done for a reason outside the agent's work (a judge or grader
    provider that failed after retries, a judge reply that stayed unreadable, a grader the
    harness could not start); makes a run void with end reason grader_error."""


class GradingFault(Exception):
    """Grading failed on what the agent delivered: a check, predicate, grader or KPI program
    that raised, timed out or ran out of memory on the agent's files, programs or answer, or a
    non-finite, non-numeric or unreadable result. SPEC "who failed decides": the part scores 0
    and the fault is recorded; if the same grader fails on the task's own reference too, the
    task is broken. Never a void run: an agent must not be able to remove a score by failing
    loudly."""

    def __init__(self, part: str, reason: str) -> None:
        self.part = part
        self.reason = reason
        super().__init__(f"{part}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.part, self.reason)
