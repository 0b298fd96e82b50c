"""What a task is: the one task model every format is read into."""

from assay.task.model import (
    EXECUTIONS,
    LEVELS,
    MODALITIES,
    TOOL_NAMES,
    Budget,
    GradingSpec,
    MachineCheck,
    PolicySpec,
    Predicate,
    Rubric,
    RubricItem,
    Task,
    Value,
    WorkspaceFile,
)

__all__ = [
    "EXECUTIONS", "LEVELS", "MODALITIES", "TOOL_NAMES", "Budget", "GradingSpec", "MachineCheck",
    "PolicySpec", "Predicate", "Rubric", "RubricItem", "Task", "Value", "WorkspaceFile",
]
