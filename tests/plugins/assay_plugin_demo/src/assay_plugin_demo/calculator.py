"""The `calculator` tool: arithmetic on a parsed expression (Python's `ast`), never `eval`.

Numbers (integers and decimals), `+ - * / // % **`, unary signs and parentheses; anything
else (names, calls, attributes, strings) is refused. A bad expression raises ValueError,
which the agent reads as the tool's error.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from assay.agent.tools import Tool, ToolBox
from assay.llm.messages import ToolSpec

MAX_EXPRESSION = 200
MAX_EXPONENT = 1000
MAX_DIGITS = 1000
MAX_BITS = 3322  # about MAX_DIGITS decimal digits

_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


def _POW(a: Any, b: Any) -> Any:
    return a**b


def _checked(value: Any) -> int | float:
    """Every intermediate result: a real, finite number of at most MAX_DIGITS digits."""
    if isinstance(value, complex):  # a negative number to a fractional power
        raise ValueError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result is not a finite number")
    if isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise ValueError(f"the result has more than {MAX_DIGITS} digits")
    return value  # type: ignore[no-any-return]


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value  # type: ignore[no-any-return]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(b) > MAX_EXPONENT or (isinstance(a, int) and isinstance(b, int) and b > 0
                                         and abs(a).bit_length() * b > MAX_BITS):
                raise ValueError(f"the power {a!r} ** {b!r} is too large")
            op = _POW
        else:
            op = _BINARY.get(type(node.op))
        if op is None:
            raise ValueError(f"operator {type(node.op).__name__} is not supported")
        try:
            return _checked(op(a, b))
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        except OverflowError:
            raise ValueError("the result is too large") from None
    raise ValueError(f"only numbers and + - * / // % ** are allowed, not {type(node).__name__}")


def calculate(expression: str) -> str:
    """The value of an arithmetic expression, as text (ValueError for anything else)."""
    if len(expression) > MAX_EXPRESSION:
        raise ValueError(f"expression longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {e.msg}") from None
    value = _value(tree.body)
    return repr(value)


def _run(arguments: dict[str, Any], box: ToolBox) -> str:
    return calculate(arguments["expression"])


CALCULATOR = Tool(
    spec=ToolSpec(
        name="calculator",
        description="Evaluate an arithmetic expression (numbers, + - * / // % **, parentheses) exactly.",
        parameters={"type": "object", "properties": {"expression": {"type": "string",
                                                                    "description": "e.g. (1234 * 5678) + 9"}},
                    "required": ["expression"], "additionalProperties": False},
    ),
    run=_run,
)
