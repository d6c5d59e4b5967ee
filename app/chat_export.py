"""A chat as a file: Markdown to read or share (the conversation as shown), JSON to bring back
into Hearth (here or on another computer) with every version of every message: each message
names the one it follows (``parent``), and ``leaf`` the last one shown. Reading a JSON file is
reading untrusted input: its size is capped before it is parsed, and every field is checked
(a message may follow only one written before it, so the file cannot describe a loop); the
caller runs it off the event loop. A file of version 1 (one line, no versions) still imports."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from app.conversations import Conversation, Message, Sampling
from runtime.sampling_params import MAX_STOP_CHARS, MAX_STOPS

FORMAT, VERSION = "hearth-chat", 2
READABLE_VERSIONS = (1, 2)
MAX_FILE_BYTES = 32 * 2**20
MAX_MESSAGES = 5_000
MAX_TITLE = 200
ROLES = ("user", "assistant")
#: what of an answer's numbers travels with it (not tool results' internals, not citations)
META_KEYS = ("model", "finish", "tokens_per_s", "completion_tokens", "prompt_tokens", "ttft_s", "reasoning")


class ChatFileError(ValueError):
    """The file is not a chat Hearth can import; the message says what is wrong."""


@dataclass(slots=True)
class ChatFile:
    """A chat read from a file, checked, ready to store."""

    title: str
    model: str = ""
    system_prompt: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    messages: list[tuple[str, str, dict]] = field(default_factory=list)  # (role, content, meta)
    #: per message, the 1-based place in ``messages`` of the one it follows (0: a first message);
    #: None: each follows the one before (a file without versions)
    parents: list[int] | None = None
    leaf: int = 0  #: the 1-based place of the last message shown (0: the last one)


def to_markdown(c: Conversation, messages: list[Message]) -> str:
    lines = [f"# {c.title}", ""]
    about = [f"Model: {c.model}" if c.model else "", time.strftime("Exported %Y-%m-%d %H:%M")]
    lines += [f"*{' · '.join(a for a in about if a)}*", ""]
    if c.system_prompt.strip():
        lines += ["## System", "", c.system_prompt.strip(), ""]
    for m in messages:
        lines += ["## You" if m.role == "user" else "## Assistant", "", m.content.strip() or "*(empty)*", ""]
        if m.meta.get("finish") == "interrupted":
            lines += ["*This answer was cut off before it was complete.*", ""]
    return "\n".join(lines)


def to_json(c: Conversation, messages: list[Message], tree: list[Message] | None = None) -> dict:
    """The chat as JSON: every message of ``tree`` (all versions, in the order they were written;
    by default only the ``messages`` shown), numbered from 1 in that order, each with the number
    of the one it follows; ``leaf`` is the last one shown."""
    every = sorted(tree, key=lambda m: m.id) if tree else list(messages)
    number = {m.id: i for i, m in enumerate(every, 1)}
    parent = ({m.id: m.parent_id for m in every} if tree else
              {m.id: (messages[i - 1].id if i else 0) for i, m in enumerate(messages)})
    out = [{"id": number[m.id], "parent": number.get(parent[m.id], 0), "role": m.role, "content": m.content,
            "meta": {k: v for k, v in m.meta.items() if k in META_KEYS}} for m in every]
    return {"format": FORMAT, "version": VERSION, "title": c.title, "model": c.model,
            "system_prompt": c.system_prompt, "sampling": c.sampling.to_dict(),
            "leaf": number.get(messages[-1].id, 0) if messages else 0,
            "messages": out}


def write(path: str | Path, c: Conversation, messages: list[Message], fmt: str, tree: list[Message] | None = None) -> None:
    """Write the chat as ``fmt``: "markdown" (the ``messages`` shown) or "json" (with every
    version: ``tree``, all the chat's messages)."""
    text = to_markdown(c, messages) if fmt == "markdown" else json.dumps(to_json(c, messages, tree), indent=1,
                                                                          ensure_ascii=False)
    Path(path).write_text(text, encoding="utf-8")


def read(path: str | Path) -> ChatFile:
    """Read a chat exported as JSON; ``ChatFileError`` names what is wrong."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ChatFileError(f"{p.name} is {size / 2**20:.0f} MB; a chat file can be at most "
                                f"{MAX_FILE_BYTES // 2**20} MB.")
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ChatFileError(f"{p.name} cannot be read ({e.strerror or e}).") from None
    except (UnicodeDecodeError, ValueError) as e:
        if isinstance(e, ChatFileError):
            raise
        raise ChatFileError(f"{p.name} is not a JSON file (Hearth imports the JSON it exports).") from None
    return parse(data, p.name)


def parse(data, name: str = "the file") -> ChatFile:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ChatFileError(f"{name} is not a chat exported by Hearth (no \"format\": \"{FORMAT}\").")
    version = data.get("version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ChatFileError(f"{name} has version {version!r}; this Hearth reads versions "
                            f"{', '.join(map(str, READABLE_VERSIONS))}.")
    msgs = data.get("messages")
    if not isinstance(msgs, list):
        raise ChatFileError(f"{name}: \"messages\" must be a list.")
    if len(msgs) > MAX_MESSAGES:
        raise ChatFileError(f"{name} has {len(msgs):,} messages; at most {MAX_MESSAGES:,} can be imported.")
    out = ChatFile(_text(data, "title", name)[:MAX_TITLE] or "Imported chat", _text(data, "model", name),
                   _text(data, "system_prompt", name))
    sampling = data.get("sampling")
    if isinstance(sampling, dict):
        numbers = ("temperature", "top_p", "max_tokens", "seed", "top_k", "min_p", "repeat_penalty")
        s = Sampling.from_dict({k: v for k, v in sampling.items() if k in numbers
                                and (v is None or isinstance(v, (int, float))) and not isinstance(v, bool)})
        stop = sampling.get("stop")
        if isinstance(stop, list):
            s.stop = tuple(x[:MAX_STOP_CHARS] for x in stop if isinstance(x, str) and x)[:MAX_STOPS]
        out.sampling = s
    tree = version >= 2
    place: dict[int, int] = {}  # a message's id in the file -> its 1-based place
    parents: list[int] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ChatFileError(f"{name}: message {i + 1} needs a \"role\" (user or assistant) and a text \"content\".")
        meta = m.get("meta")
        meta = meta if isinstance(meta, dict) else {}
        out.messages.append((m["role"], m["content"], {k: meta[k] for k in META_KEYS if k in meta
                                                         and isinstance(meta[k], (str, int, float))}))
        if tree:
            mid, parent = m.get("id"), m.get("parent")
            if not _whole(mid) or mid <= 0 or mid in place:
                raise ChatFileError(f"{name}: message {i + 1} needs its own \"id\", a positive whole number.")
            if not _whole(parent) or (parent != 0 and parent not in place):
                raise ChatFileError(f"{name}: message {i + 1} follows \"parent\" {parent!r}, which is not a "
                                    "message written before it (0 for a first message).")
            place[mid] = i + 1
            parents.append(place.get(parent, 0))
    if tree:
        leaf = data.get("leaf", 0)
        out.parents = parents
        out.leaf = place.get(leaf, 0) if _whole(leaf) else 0
    return out


def _whole(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(data: dict, key: str, name: str) -> str:
    v = data.get(key, "")
    if not isinstance(v, str):
        raise ChatFileError(f"{name}: \"{key}\" must be text.")
    return v
