"""Which tools a request lets the model call (a leaf module: the service and remote engines use it).

The service enforces a choice with the call grammar it compiles; a remote engine forwards it to
its upstream in OpenAI's words (:meth:`ToolChoice.openai`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ChoiceKind = Literal["auto", "none", "required", "function"]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """``auto``: the model decides; ``none``: no tools are offered; ``required``: at least one
    call; ``function``: a call of the function ``name``."""

    kind: ChoiceKind = "auto"
    name: str | None = None

    @property
    def forced(self) -> bool:
        """A call must be made (required, or a named function)."""
        return self.kind in ("required", "function")

    def openai(self) -> str | dict:
        """OpenAI chat's ``tool_choice``."""
        if self.kind == "function":
            return {"type": "function", "function": {"name": self.name}}
        return self.kind


AUTO = ToolChoice("auto")
NONE = ToolChoice("none")
REQUIRED = ToolChoice("required")


def function_choice(name: str) -> ToolChoice:
    """The choice that forces a call of ``name``."""
    return ToolChoice("function", name)
