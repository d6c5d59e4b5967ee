"""System-prompt presets: a few that ship with Hearth and the user's own, kept in a small JSON
file in the data directory (owner-only, written atomically). A preset is a name, a system
prompt and the chat settings that go with it: a built-in one its temperature, the user's own
every setting of the chat it was saved from (top-p, top-k, min-p, repeat penalty, answer
length, stop strings), the seed aside."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from runtime.sampling_params import LIMITS, MAX_STOP_CHARS, MAX_STOPS

log = logging.getLogger("hearth.app")
MAX_PRESETS = 200
#: the chat settings a preset keeps besides its temperature (the API's names)
NUMBERS = ("top_p", "top_k", "min_p", "repeat_penalty", "max_tokens")


@dataclass(slots=True, frozen=True)
class Preset:
    name: str
    prompt: str
    temperature: float | None = None
    builtin: bool = False
    #: the other chat settings it sets: ``NUMBERS`` and ``stop`` (a list), by the API's names
    settings: dict = field(default_factory=dict)


BUILTIN = (
    Preset("Concise assistant", "You are a helpful assistant. Answer briefly and directly; use lists "
           "only when they make the answer clearer.", None, True),
    Preset("Coding helper", "You are an expert programmer. Give working code in fenced blocks with the "
           "language named, explain only what is not obvious, and point out bugs and edge cases.", 0.2, True),
    Preset("Translator", "Translate the user's text. If it is in English, translate it into French; "
           "otherwise into English. Reply with the translation only.", 0.1, True),
    Preset("Writing editor", "You are a careful editor. Improve the clarity, grammar and flow of the "
           "user's text without changing its meaning, then list the main changes.", 0.4, True),
    Preset("Patient teacher", "You are a patient teacher. Explain step by step with a small example, "
           "check understanding with one short question at the end.", 0.7, True),
)


class PresetStore:
    """The built-in presets, then the user's (by name; a user preset may not take a built-in's name)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._own: list[Preset] = self._load()

    def _load(self) -> list[Preset]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            log.warning("prompt presets %s unreadable (%s); starting without them", self.path, e)
            return []
        out = []
        for p in raw.get("presets", []) if isinstance(raw, dict) else []:
            if isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("prompt"), str):
                t = p.get("temperature")
                out.append(Preset(p["name"].strip()[:80], p["prompt"],
                                  float(t) if isinstance(t, (int, float)) and 0 <= t <= 2 else None,
                                  settings=checked_settings(p.get("settings"))))
        return [p for p in out if p.name][:MAX_PRESETS]

    def _save(self) -> None:
        from runtime.private_files import write_private

        body = {"presets": [{"name": p.name, "prompt": p.prompt, "temperature": p.temperature, "settings": p.settings}
                            for p in self._own]}
        write_private(self.path, json.dumps(body, indent=2))

    def presets(self) -> list[Preset]:
        return list(BUILTIN) + list(self._own)

    def get(self, name: str) -> Preset | None:
        return next((p for p in self.presets() if p.name == name), None)

    def matching(self, prompt: str) -> Preset | None:
        """The preset whose prompt this is, if any."""
        return next((p for p in self.presets() if p.prompt.strip() == prompt.strip() and prompt.strip()), None)

    def save(self, name: str, prompt: str, temperature: float | None = None,
             settings: dict | None = None) -> str | None:
        """Add or replace the user's preset ``name`` (``settings``: the chat's other settings,
        see ``Preset.settings``); a sentence for the user when it cannot be."""
        name = " ".join(name.split())[:80]
        if not name:
            return "Give the preset a name."
        if not prompt.strip():
            return "The system prompt is empty: there is nothing to keep."
        if any(p.name == name for p in BUILTIN):
            return f"“{name}” is a built-in preset; choose another name."
        own = [p for p in self._own if p.name != name]
        if len(own) >= MAX_PRESETS:
            return f"There are already {MAX_PRESETS} presets; delete one first."
        self._own = own + [Preset(name, prompt, temperature, settings=checked_settings(settings))]
        self._save()
        return None

    def delete(self, name: str) -> bool:
        """Delete the user's preset ``name`` (built-in ones stay)."""
        own = [p for p in self._own if p.name != name]
        if len(own) == len(self._own):
            return False
        self._own = own
        self._save()
        return True


def checked_settings(raw) -> dict:
    """The settings of ``raw`` that the API takes, in its ranges (a hand-edited file may hold
    anything): numbers of ``NUMBERS``, and ``stop`` as a list of at most ``MAX_STOPS`` strings."""
    out: dict = {}
    if not isinstance(raw, dict):
        return out
    for name in NUMBERS:
        v = raw.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        lo, hi = LIMITS[name]
        if lo <= v <= hi:
            out[name] = int(v) if name in ("top_k", "max_tokens") else float(v)
    stop = raw.get("stop")
    if isinstance(stop, list):
        out["stop"] = [s[:MAX_STOP_CHARS] for s in stop if isinstance(s, str) and s][:MAX_STOPS]
    return out
