"""Which model ``hearth launch`` points a client at: one whose context holds the client's first
prompt and whose chat template renders tools, or, when none here does, a catalog model to pull.

A coding agent's first request carries its instructions and tools: 2-20k tokens
(``Client.first_prompt``). A model whose context is shorter answers it "prompt is too long", and
the client stops. So the model must hold that prompt and ``REPLY_ROOM`` more; its trained context
bounds what any load can give it, and the service's default context for it (``--ctx``, else the
fit plan's) is what it gets unless asked for more. When the trained context holds the prompt and
the default does not, launch loads the model with a larger one (``context_to_load``), after the
fit planner says it fits this machine.

The models come from the running service (``service.py``), else from the local store; the
service's default model when none is loaded is not reported anywhere, so a choice never rests on it.
A remote model (served by an upstream engine) counts when its context holds the prompt: whether
it does tool calls is the upstream's to say, and the service does not report it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runtime.launch.clients import REPLY_ROOM, Client
from runtime.launch.service import Known, Service

#: the suggestion: the largest of the catalog's agent models (``agent_models()``: they call tools
#: and read a long context) that decodes at least this fast here (the planner's estimate); else
#: the smallest that fits
MIN_TOKENS_PER_S = 8.0
#: the suggestion when no service can plan one: a dense 4B model, at home on most machines
PLAIN_SUGGESTION = "qwen3.5-4b"


def needed(client: Client) -> int:
    """The context the client needs: its first prompt and room for the reply."""
    return client.first_prompt + REPLY_ROOM


def context_to_load(need: int, trained: int | None) -> int:
    """A context that holds ``need`` tokens: the next power of two, within the trained context."""
    ctx = 1 << (need - 1).bit_length()
    return min(ctx, trained) if trained else ctx


@dataclass(slots=True)
class Choice:
    model: str
    #: the longest request the client can count on (None: not known, e.g. a model the service lacks)
    context: int | None
    #: the context launch loads the model with first (None: it serves the prompt as it is)
    load_ctx: int | None = None
    #: the context the service would give it otherwise (when ``load_ctx`` is set)
    default_ctx: int | None = None
    tools: bool | None = False  #: its chat template renders tools (None: an upstream's model, not known)
    notes: list[str] = field(default_factory=list)  #: what the printed settings say besides its limits
    warnings: list[str] = field(default_factory=list)  #: why it may not work (a model named with --model)

    def limits(self, client: Client) -> str:
        """Its context against the client's first request, and whether it does tool calls."""
        context = f"{self.context:,} tokens" if self.context else "not known"
        tools = {True: "tool calls in its chat template", False: "no tool calls in its chat template",
                 None: "served by an upstream engine"}[self.tools]
        return f"context {context} ({client.title}'s first request: about {client.first_prompt:,}); {tools}"


@dataclass(slots=True)
class NoFit:
    """No model here holds the client's prompt with tool calls: what each lacks, and what to pull."""

    client: Client
    need: int
    rejected: list[tuple[str, str]]  #: (model, why)
    suggestion: str  #: a catalog id
    about: str  #: what the suggestion is, in a few words

    def message(self) -> str:
        c = self.client
        tools = ", and the model's chat template must render its tools" if c.needs_tools else ""
        lines = [f"hearth: no model here can serve {c.title}: its first request is about {c.first_prompt:,} tokens "
                 f"({self.need:,} with room for the reply){tools}."]
        width = max((len(m) for m, _ in self.rejected), default=0)
        lines += [f"  {m.ljust(width)}  {why}" for m, why in self.rejected]
        lines += [f"A model that suits coding agents: {self.suggestion} ({self.about}). Download it with",
                  f"  hearth pull {self.suggestion}",
                  f"and run `hearth launch {c.name}` again (or name a model of yours with --model)."]
        return "\n".join(lines)


def choose(client: Client, models: list[Known], service: Service | None, named: str | None,
           last_used: str | None) -> Choice | NoFit:
    """The model for ``client``: ``named`` (with warnings when it falls short), else the best
    of ``models`` that holds the client's prompt and does tool calls, else a ``NoFit``.
    ``service``: the running service (None: the models are the local store's)."""
    need = needed(client)
    if named is not None:
        found = next((m for m in models if m.id == named), None)
        if found is None:
            where = "the service's models" if service else "the models on this computer"
            return Choice(named, None, warnings=[f"{named} is not among {where}; it is used as named"])
        return _sized(found, client, need, service, named=True)
    rejected: list[tuple[str, str]] = []
    usable: list[tuple[tuple, Choice]] = []
    for m in models:
        why = _shortfall(m, need, client.needs_tools)
        choice = _sized(m, client, need, service, named=False) if why is None else None
        if choice is not None and choice.warnings:
            why, choice = choice.warnings[0], None
        if choice is None:
            rejected.append((m.id, why or "cannot be used"))
            continue
        rank = (choice.load_ctx is not None, not m.loaded, m.id != last_used, -(m.trained or 0))
        usable.append((rank, choice))
    if usable:
        return min(usable, key=lambda rc: rc[0])[1]
    suggestion, about = suggest(need, service)
    return NoFit(client, need, rejected, suggestion, about)


def _shortfall(m: Known, need: int, tools: bool) -> str | None:
    """Why ``m`` cannot serve a client that needs ``need`` tokens (and ``tools``) (None: it may)."""
    if not m.chat:
        return "no chat template (a base model)"
    if m.remote:
        return None if (m.served or 0) >= need else f"served by an upstream with a {m.served or 0:,}-token context"
    if m.trained is not None and m.trained < need:
        return f"its context is {m.trained:,} tokens"
    if tools and not m.tools:
        return "its chat template does not render tools"
    return None


def _sized(m: Known, client: Client, need: int, service: Service | None, named: bool) -> Choice:
    """``m`` with the context it serves the client with, and the load that gives it that."""
    served = m.served
    if service is not None and not m.loaded and not m.remote:
        served = service.show(m.id)[0]
    if served is not None and m.trained:
        served = min(served, m.trained)  # a request never gets more than the trained context
    choice = Choice(m.id, served, tools=None if m.remote else m.tools)
    if not m.remote and (served is None or served < need):
        target = context_to_load(need, m.trained)
        if served is None or target > served:
            plan = service.fit(m.id, target) if service is not None else None
            if service is not None and not (plan and plan.get("fits")):
                why = plan.get("message") if plan else None
                choice.warnings.append(f"it does not fit this machine with a {target:,}-token context"
                                       + (f" ({why})" if why else ""))
            else:
                choice.context, choice.load_ctx, choice.default_ctx = target, target, served
    short = _shortfall(m, need, client.needs_tools)
    if named and short is not None:
        choice.warnings.append(f"{m.id}: {short}; {client.title}'s first request is about {client.first_prompt:,} "
                               f"tokens: `hearth launch {client.name}` without --model picks a model that fits")
    return choice


def suggest(need: int, service: Service | None) -> tuple[str, str]:
    """A catalog model for coding agents whose context holds ``need`` tokens, and what it is:
    the largest of the catalog's agent models that the fit planner says runs here at
    ``MIN_TOKENS_PER_S``, else the smallest that fits, else (no service to plan with, or nothing
    fits) ``PLAIN_SUGGESTION``."""
    from runtime.store.catalog import agent_models

    holding = [e for e in agent_models() if e.context_length >= need]
    fitting = []
    for entry in holding:
        plan = service.fit(entry.id, context_to_load(need, entry.context_length)) if service is not None else None
        if plan is not None and plan.get("fits"):
            fitting.append((entry, plan))
    fast = [(e, p) for e, p in fitting if (p.get("predicted_tokens_per_s") or 0) >= MIN_TOKENS_PER_S]
    if fast or fitting:
        entry, plan = (fast or fitting[::-1])[0]
        speed = plan.get("predicted_tokens_per_s")
        here = f", about {speed:.0f} tokens/s here" if speed else ""
        size = (plan.get("weights_bytes") or 0) / 1e9
        return entry.id, (f"{entry.name}: a {entry.context_length:,}-token context, tool calls in its template, "
                          f"{size:.1f} GB{here}")
    plain = next((e for e in holding if e.id == PLAIN_SUGGESTION), holding[-1] if holding else None)
    if plain is None:
        raise LookupError(f"the catalog has no agent model with a {need:,}-token context")
    entry = plain
    return entry.id, (f"{entry.name}: a {entry.context_length:,}-token context, tool calls in its template; "
                      f"`hearth fit {entry.id} --ctx {context_to_load(need, entry.context_length)}` says "
                      "whether it fits this machine")


def stored_models(data_dir: Path) -> list[Known]:
    """The local store's models that generate text, as ``Known`` (nothing is loaded: no service
    runs), read from their GGUF headers; an embedded model not placed yet from the catalog."""
    from runtime.server.generate.capabilities import capabilities
    from runtime.store.catalog import load_catalog
    from runtime.store.gguf_file import InvalidModelFile, read_header
    from runtime.store.registry import Registry

    catalog = load_catalog()
    reg = Registry(data_dir)
    out = []
    placed = reg.models()
    for e in catalog.values():
        if e.embedded is not None and e.id not in {m.id for m in placed} and e.raw.get("format") != "onnx" \
                and not e.raw.get("task"):
            out.append(Known(e.id, e.context_length, None, False, bool(e.raw.get("chat_template")), False))
    for m in placed:
        caps = capabilities(Path(m.path))
        if "completion" not in caps:
            continue
        try:
            trained = read_header(m.path).arch_value("context_length")
        except (OSError, InvalidModelFile):
            trained = None
        out.append(Known(m.id, trained if isinstance(trained, int) else None, None, False, "chat" in caps,
                         "tools" in caps))
    return out
