"""What a constraint is, apart from the library that enforces it.

The service reads, checks and sends constraints without calling the grammar library (llguidance,
native code): it is called only where grammars are compiled (the constraint compiler's helper
process) and enforced (the engine worker). This module imports nothing native, so the helper's
jobs and the service's parsers can name constraints without it.
"""

from __future__ import annotations

from dataclasses import dataclass

JSON_SCHEMA = "json_schema"
JSON_OBJECT = "json_object"
REGEX = "regex"
LARK = "lark"
GBNF = "gbnf"
KINDS = (JSON_SCHEMA, JSON_OBJECT, REGEX, LARK, GBNF)
#: JSON is written compactly, one space after ':' and ',': a small model given free whitespace
#: can loop on newlines until max_tokens
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class ConstraintError(ValueError):
    """A constraint that cannot be compiled; ``code`` is stable, ``param`` names the field."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_constraint") -> None:
        super().__init__(message)
        self.param = param
        self.code = code

    def __reduce__(self):  # crosses the helper process's pipe with its param and code
        return type(self), (str(self), self.param, self.code)


@dataclass(slots=True)
class ConstraintSpec:
    """A compiled constraint as it crosses the pipe: an llguidance grammar (text).

    ``trigger``: None enforces the grammar from the first token; a string applies it lazily,
    once the output text contains the trigger (the grammar starts with the trigger itself).
    """

    kind: str
    grammar: str
    trigger: str | None = None
