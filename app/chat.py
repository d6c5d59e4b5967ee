"""Chat: conversations, sending, streaming into the message model, stop, regenerate, edit and resend,
and flipping between the versions those keep.

Tokens arrive as server-sent events; they are buffered and flushed into the message model
every ``flush_ms`` (about 50 ms), so the view repaints at a steady rate however fast the model
writes. When the answer ends its numbers are kept with it: model, tokens/s, time to first
token, cached prompt tokens and, when speculation ran, the draft acceptance rate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import asyncio
import time

from PySide6.QtCore import QObject, QTimer, Signal

from app import background
from app.api_client import ApiClient
from app.conversations import Conversation, ConversationStore, Message, MessageMeta, Sampling, SearchHit
from app.errors import MODEL_PROBLEMS, ApiProblem, ServiceUnreachable, UserError, explain
from app.qt_models import ConversationListModel, MessageListModel
from app import tool_loop
from app.tool_loop import DENY, Permissions, ToolCall

TITLE_CHARS = 48


class ToolSource(Protocol):
    """Where a chat's tools come from (``McpService``)."""

    def api_tools(self) -> list[dict]: ...

    async def call(self, name: str, arguments: dict, timeout_s: float) -> str: ...

    def server_of(self, api_name: str) -> str: ...


#: adds document context to a request and returns the citations (``DocumentsService.augment``)
Augment = Callable[[Conversation, dict], Awaitable[list[dict]]]


class ChatService(QObject):
    busy_changed = Signal(bool)
    error = Signal(object)  # UserError
    current_changed = Signal(object)  # Conversation or None
    finished = Signal(object)  # the assistant Message, when its answer ended (done, stopped or failed)

    tool_call_changed = Signal(object)  # a ToolCall of the live answer (asked, running, done)
    variant_switched = Signal(object)  # the Conversation, after another version of a message was shown

    def __init__(self, client: ApiClient, store: ConversationStore, *, flush_ms: int = 50,
                 tools: ToolSource | None = None, always_allowed: set[str] | None = None,
                 decode_limit: Callable[[str], float | None] | None = None, augment: Augment | None = None) -> None:
        super().__init__()
        self.client, self.store = client, store
        #: the decode speed a model's placement allows at most (the service's memory-wall figure)
        self.decode_limit = decode_limit
        #: where tools come from (``McpService``: ``api_tools()``, ``call(name, args, timeout)``,
        #: ``server_of(name)``), or None
        self.tools = tools
        #: asks the user about one tool call (the window sets it); no window: nothing runs
        self.ask = _deny
        self.always_allowed = always_allowed if always_allowed is not None else set()
        self.max_steps = tool_loop.DEFAULT_MAX_STEPS
        self.tool_timeout_s = tool_loop.DEFAULT_TOOL_TIMEOUT_S
        #: adds document context to a request (``DocumentsService.augment``), or None
        self.augment = augment
        self.conversations = ConversationListModel()
        self.messages = MessageListModel()
        self.current: Conversation | None = None
        self._search = ""
        #: chat id -> where the search matched in its messages (``ConversationStore.search_hits``)
        self.search_hits: dict[int, SearchHit] = {}
        self._task: asyncio.Task | None = None
        self._live: Message | None = None
        self._live_conversation: int | None = None
        self._pending: list[str] = []
        self._timer = QTimer(self)
        self._timer.setInterval(flush_ms)
        self._timer.timeout.connect(self._flush)
        self.reload()

    # conversations
    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def reload(self) -> None:
        self.search_hits = self.store.search_hits(self._search)
        self.conversations.reset(self.store.conversations(self._search))

    def search(self, text: str) -> None:
        """Show only the chats whose title or messages contain ``text``; ``search_hits`` says
        where each matched in its messages (a snippet of the first message that does)."""
        self._search = text.strip()
        self.reload()

    @property
    def search_text(self) -> str:
        """What the chat list is filtered by now ("" when it shows every chat)."""
        return self._search

    def new_conversation(self, model: str = "") -> Conversation:
        c = self.store.create(model=model)
        self._search = ""
        self.reload()
        self.select(c.id)
        return c

    def current_or_new(self) -> Conversation:
        """The open chat; a new one, opened, when none is."""
        if self.current is None:
            self.new_conversation()
        assert self.current is not None  # new_conversation opened it
        return self.current

    def select(self, conversation_id: int | None) -> None:
        c = self.store.get(conversation_id) if conversation_id is not None else None
        self.current = c
        msgs = self.store.messages(c.id) if c else []
        if c is not None and self._live is not None and self._live_conversation == c.id:
            msgs = [self._live if m.id == self._live.id else m for m in msgs]
        self.messages.reset(msgs)
        self.current_changed.emit(c)

    def rename(self, conversation_id: int, title: str) -> None:
        c = self.store.get(conversation_id)
        if c is None or not title.strip():
            return
        c.title = title.strip()
        self.store.update(c)
        if self.current is not None and self.current.id == c.id:
            self.current.title = c.title
            self.current_changed.emit(self.current)
        if self.conversations.row_of(c.id) is not None:
            self.conversations.upsert(c)  # in place: the chat stays under the cursor
        else:
            self.reload()

    def delete(self, conversation_id: int) -> None:
        if self._live_conversation == conversation_id:
            self.stop()
        self.store.delete(conversation_id)
        self.reload()
        if self.current is not None and self.current.id == conversation_id:
            self.select(None)

    async def export_chat(self, conversation_id: int, path: str, fmt: str) -> bool:
        """Write a chat to ``path`` as "markdown" or "json" (off the event loop)."""
        from app import chat_export

        c = self.store.get(conversation_id)
        if c is None:
            return False
        try:
            await asyncio.to_thread(chat_export.write, path, c, self.store.messages(c.id), fmt,
                                    self.store.tree(c.id) if fmt == "json" else None)
        except OSError as e:
            self.error.emit(UserError("The chat could not be exported.", f"{path}: {e.strerror or e}.",
                                      "Choose a folder you can write to.", "chat_file"))
            return False
        return True

    async def import_chat(self, path: str) -> Conversation | None:
        """Bring back a chat exported as JSON, as a new chat, and open it."""
        from app import chat_export

        try:
            f = await asyncio.to_thread(chat_export.read, path)  # untrusted input: parsed off the loop
        except chat_export.ChatFileError as e:
            self.error.emit(UserError("The chat could not be imported.", str(e),
                                      "Choose a .json file that Hearth exported.", "chat_file"))
            return None
        c = self.store.create(f.title, f.model, f.system_prompt, f.sampling)
        if f.parents is None:
            self.store.add_messages(c.id, f.messages)
        else:
            self.store.add_tree(c.id, f.messages, f.parents, f.leaf)
        self._search = ""
        self.reload()
        self.select(c.id)
        return c

    def configure(self, *, model: str | None = None, system_prompt: str | None = None,
                  sampling: Sampling | None = None, conversation_id: int | None = None) -> None:
        """Per-conversation model, system prompt and sampling: of the open chat, or of the chat
        ``conversation_id`` (a change the side panel made just before another chat opened)."""
        c = self.current
        if conversation_id is not None and (c is None or c.id != conversation_id):
            c = self.store.get(conversation_id)
        if c is None:
            return
        if model is not None:
            c.model = model
        if system_prompt is not None:
            c.system_prompt = system_prompt
        if sampling is not None:
            c.sampling = sampling
        self.store.update(c)

    def set_option(self, name: str, value: object) -> bool:
        """One per-chat option of the open chat (``tools``, ``ctx``, ...), kept in the store;
        False when no chat is open or the option already has that value."""
        c = self.current
        if c is None or c.options.get(name) == value:
            return False
        c.options[name] = value
        self.store.update(c)
        return True

    # sending
    def send(self, text: str, attachments: list[dict] | None = None) -> bool:
        """Send a message; ``attachments`` (name and text of dropped files) go with it as context."""
        text = text.strip()
        if not (text or attachments) or self.busy:
            return False
        c = self.current_or_new()
        if not self.store.messages(c.id) and c.title == "New chat":
            self.rename(c.id, _title(text or ", ".join(a["name"] for a in attachments or ())))
        meta = {"attachments": list(attachments)} if attachments else None
        self.messages.append(self.store.add_message(c.id, "user", text, meta))
        self._generate()
        return True

    def regenerate(self) -> bool:
        """Ask again for the last answer; the old answer stays as an earlier version of it."""
        if self.busy or self.current is None:
            return False
        msgs = self.messages.items()
        if not msgs or msgs[-1].role != "assistant":
            return False
        self.messages.remove_from(len(msgs) - 1)
        self._generate(parent_id=msgs[-1].parent_id)
        return True

    def edit_and_resend(self, message_id: int, text: str) -> bool:
        """Ask again with a user message's new text. The new text is a new version of the
        message: the old one, and the conversation that followed it, stay as the earlier version."""
        text = text.strip()
        row = self.messages.row_of(message_id)
        if self.busy or self.current is None or row is None or not text:
            return False
        m = self.messages.item(row)
        if m.role != "user":
            return False
        if text == m.content and row + 1 >= self.messages.rowCount():
            self._generate()  # the same question with no answer yet: just ask it
            return True
        self.messages.remove_from(row)
        meta = {"attachments": m.meta["attachments"]} if m.meta.get("attachments") else None  # the files stay
        self.messages.append(self.store.add_message(self.current.id, "user", text, meta, parent_id=m.parent_id))
        self._generate()
        return True

    def switch_variant(self, message_id: int, step: int) -> bool:
        """Show the version of a message ``step`` places away (-1 older, +1 newer), and the
        conversation that followed that version. Not while an answer is being written."""
        if self.busy or self.current is None:
            return False
        if self.store.switch_variant(self.current.id, message_id, step) is None:
            return False
        shown, path = self.messages.items(), self.store.messages(self.current.id)
        same = 0  # the messages above the switched one stay as they are (their widgets too)
        while same < min(len(shown), len(path)) and shown[same].id == path[same].id:
            same += 1
        self.messages.remove_from(same)
        self.messages.extend(path[same:])
        self.variant_switched.emit(self.current)
        return True

    def stop(self) -> None:
        if self._task is not None and not self._task.done():  # busy
            self._task.cancel()

    def _request_body(self, c: Conversation, history: list[Message]) -> dict:
        msgs = [{"role": "system", "content": c.system_prompt}] if c.system_prompt.strip() else []
        msgs += tool_loop.history_messages(history)
        body = {"messages": msgs, **c.sampling.to_request()}
        if c.model:
            body["model"] = c.model
        if c.options.get("response_format"):
            body["response_format"] = c.options["response_format"]
        return body

    async def count_next(self, attachments: list[dict] | None = None) -> dict:
        """The current chat as its next request would send it (``attachments``: files attached to
        the message being written), counted by the service with the chat's overflow policy:
        ``{"prompt_tokens", "dropped_messages"}``."""
        c = self.current
        if c is None:
            return {"prompt_tokens": 0, "dropped_messages": 0}
        history = self.messages.items()
        if attachments:
            history = history + [Message(0, "user", "", {"attachments": attachments})]
        body = self._request_body(c, history)
        if not body.get("messages"):  # an empty chat with no system prompt sends nothing yet
            return {"prompt_tokens": 0, "dropped_messages": 0}
        tools = self.offered_tools(c)
        if tools:
            body["tools"] = tools
        return await self.client.post("/hearth/count_tokens", body, timeout=30)

    def offered_tools(self, c: Conversation) -> list[dict]:
        """The tools this chat offers the model: the enabled tools of running servers, unless the
        chat switched tools off."""
        if self.tools is None or c.options.get("tools") is False:
            return []
        return self.tools.api_tools()

    def _generate(self, parent_id: int | None = None) -> None:
        c = self.current
        if c is None:  # every caller has a chat open
            return
        body = self._request_body(c, self.messages.items())
        answer = self.store.add_message(c.id, "assistant", "", {"finish": "streaming"}, parent_id=parent_id)
        self.messages.append(answer)
        self._live, self._live_conversation = answer, c.id
        self._task = background.start(self._stream(answer, body, c), "the answer's stream",
                                      lambda e: self.error.emit(explain(e)))
        self.busy_changed.emit(True)

    async def _prepare(self, c: Conversation, body: dict, answer: Message) -> None:
        """Before the first step: the chat's context length (the model is loaded at it) and the
        attached documents' passages."""
        ctx = c.options.get("ctx")
        if ctx and c.model:
            from urllib.parse import quote

            await self.client.post(f"/hearth/models/{quote(c.model, safe='')}/load", {"ctx": int(ctx)}, timeout=300)
        if self.augment is not None and c.options.get("documents"):
            citations = await self.augment(c, body)
            if citations:
                answer.meta["citations"] = citations

    async def _stream(self, answer: Message, body: dict, c: Conversation) -> None:
        t0 = time.monotonic()
        self._t_first: float | None = None
        self._t_start = t0
        usage: dict = {}
        finish = None
        self._timer.start()
        tools = self.offered_tools(c)
        permissions = Permissions(set(c.options.get("allowed_tools") or ()), self.always_allowed)
        done_calls: list[dict] = []
        try:
            await self._prepare(c, body, answer)
            for step in range(self.max_steps if tools else 1):
                if tools:
                    body["tools"] = tools
                    body["tool_choice"] = tool_loop.choice_for_step(step, self.max_steps, c.options.get("tool_choice"))
                raw: list[dict] = []
                finish, step_usage = await self._step(answer, body, raw, done_calls)
                usage = _add_usage(usage, step_usage)
                if not (tools and raw and finish == "tool_calls") or self.tools is None:  # tools: it is set
                    break
                calls = tool_loop.calls_from_deltas(raw)
                for call in calls:
                    call.server = self.tools.server_of(call.name)
                self._flush()

                def changed(call: ToolCall, calls: list[ToolCall] = calls, earlier: list[dict] = done_calls) -> None:
                    answer.meta["tool_calls"] = earlier + [x.to_meta() for x in calls]
                    self.messages.changed(answer.id)
                    self.tool_call_changed.emit(call)

                await tool_loop.run_calls(calls, run_tool=self.tools.call, ask=self.ask, permissions=permissions,
                                          timeout_s=self.tool_timeout_s, changed=changed)
                if permissions.chat != set(c.options.get("allowed_tools") or ()):
                    c.options["allowed_tools"] = sorted(permissions.chat)
                    self.store.update(c)
                done_calls += [x.to_meta() for x in calls]
                answer.meta["tool_calls"] = done_calls
                body["messages"] = body["messages"] + tool_loop.round_messages(answer.content, calls)
        except asyncio.CancelledError:
            finish = "stopped"
        except ApiProblem as e:
            # cut mid-answer (the model or the service stopped): what arrived is kept, marked as cut
            cut = e.code in MODEL_PROBLEMS or (isinstance(e, ServiceUnreachable) and self._t_first is not None)
            finish = "interrupted" if cut and (answer.content or self._pending) else "error"
            problem = explain(e)
            answer.meta["error"] = problem.text()
            self.error.emit(problem)
        finally:
            self._timer.stop()
            self._flush()
            answer.meta.update(_numbers(self._t_start, self._t_first, time.monotonic(), usage))
            answer.meta["finish"] = finish or "interrupted"  # a stream that ended without saying why
            if answer.meta["finish"] in ("interrupted", "error"):
                answer.meta.pop("tokens_per_s", None)  # a cut answer's speed and count say nothing true
                answer.meta.pop("completion_tokens", None)
            elif self.decode_limit is not None and answer.meta.get("model"):
                limit = self.decode_limit(answer.meta["model"])
                if limit:
                    answer.meta["decode_limit_tps"] = limit
            self.store.update_message(answer)
            self._live, self._live_conversation = None, None
            self.messages.changed(answer.id)
            self.busy_changed.emit(False)
            self.finished.emit(answer)

    async def _step(self, answer: Message, body: dict, raw: list[dict], done_calls: list[dict]):
        """One streamed model turn into ``answer``; the tool calls it asks for go into ``raw``.
        Returns (finish_reason, usage)."""
        finish, usage = None, {}
        step_start = time.monotonic()
        async for chunk in self.client.chat_stream(body):
            if isinstance(chunk.get("model"), str):
                answer.meta["model"] = chunk["model"]
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                _side_channels(answer, delta, raw)
                if delta.get("tool_calls"):
                    answer.meta["tool_calls"] = done_calls + raw
                text = delta.get("content")
                if text:
                    if self._t_first is None:  # time to first token of the turn that wrote it
                        self._t_first = time.monotonic()
                        self._t_start = step_start
                    self._pending.append(text)
                finish = choice.get("finish_reason") or finish
            if chunk.get("usage"):
                usage = chunk["usage"]
        return finish, usage

    def _flush(self) -> None:
        if not self._pending or self._live is None:
            return
        self._live.content += "".join(self._pending)
        self._pending.clear()
        self.messages.changed(self._live.id)


async def _deny(call: ToolCall) -> str:
    return DENY


def _side_channels(answer: Message, delta: dict, calls: list[dict] | None = None) -> None:
    """Reasoning and tool calls of a streamed answer: the reasoning kept in its meta (the view
    shows it collapsed above the answer), the calls in ``calls`` (the meta's own list when none
    is given; each call is shown as a block)."""
    if delta.get("reasoning_content"):
        answer.meta["reasoning"] = answer.meta.get("reasoning", "") + delta["reasoning_content"]
    for tc in delta.get("tool_calls") or ():
        if calls is None:
            calls = answer.meta.setdefault("tool_calls", [])
        i = tc.get("index", len(calls))
        while len(calls) <= i:
            calls.append({"name": "", "arguments": ""})
        if tc.get("id"):
            calls[i]["id"] = tc["id"]
        fn = tc.get("function") or {}
        calls[i]["name"] += fn.get("name") or ""
        calls[i]["arguments"] += fn.get("arguments") or ""


def _add_usage(total: dict, step: dict) -> dict:
    """Usage over the turns of a tool loop: the last prompt, every completion token."""
    if not total:
        return dict(step)
    out = dict(step or total)
    out["completion_tokens"] = (total.get("completion_tokens") or 0) + (step.get("completion_tokens") or 0)
    return out


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"


def _numbers(t0: float, t_first: float | None, t_end: float, usage: dict) -> MessageMeta:
    """The figures shown under an answer."""
    out = MessageMeta()
    n = usage.get("completion_tokens")
    if t_first is not None:
        out["ttft_s"] = round(t_first - t0, 3)
        if n and n > 1 and t_end > t_first:
            # text that arrived in one piece at the end (a constrained reply held back until it
            # parsed) says nothing about decode speed after the first token: use the whole time
            span = t_end - t_first if t_end - t_first > 0.2 * (t_end - t0) else t_end - t0
            out["tokens_per_s"] = round((n - 1) / span, 1)
    if n is not None:
        out["completion_tokens"] = n
    if usage.get("prompt_tokens") is not None:
        out["prompt_tokens"] = usage["prompt_tokens"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        out["cached_tokens"] = cached
    rate = acceptance_rate(usage)
    if rate is not None:
        out["acceptance_rate"] = rate
    return out


def acceptance_rate(usage: dict) -> float | None:
    """The draft acceptance rate when speculation ran (the service's ``usage.speculative``:
    drafted and accepted tokens), a ratio in [0, 1]; None when nothing was drafted."""
    spec = usage.get("speculative")
    if isinstance(spec, dict) and spec.get("drafted"):
        return spec.get("accepted", 0) / spec["drafted"]
    return None
