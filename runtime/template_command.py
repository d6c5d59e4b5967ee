"""``hearth template``: the prompt the service gives a model, and how it reads the model's reply.

For debugging a model's chat template (a new model, a replacement template): the model is named
as ``hearth run`` names it; its template, BOS and EOS come from the GGUF header (the model is not
loaded), or from the override stored for it, or from ``--template``. The conversation goes
through the service's own steps: the chat request parser, the planning of tools and thinking
(``tool_calls.plan_prompt``), the template variables (``generation.template_vars``), the same
``ChatTemplate`` the worker renders with; a reply (``--parse``) is read by the service's parser.

Output: the prompt alone on stdout (byte for byte: pipe it), then what Hearth derived from the
template (where it comes from, BOS and EOS, the output contract) on stderr, as ``#`` lines;
``--contract`` prints only that, on stdout; ``--json`` prints JSON instead, with nothing on
stderr (with ``--parse``: the reply as the service returns it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.chat.chat_template import ChatTemplate
    from runtime.chat.contract import OutputContract
    from runtime.server.generate.request import GenerationRequest
    from runtime.server.generate.tool_calls import OutputPlan
    from runtime.store.model_templates import ModelTemplate

DEFAULT_MESSAGES: list[dict] = [{"role": "user", "content": "Hello"}]
_ORIGINS = {"model": "the model's own (its GGUF's tokenizer.chat_template)",
            "stored": "the override stored for this model", "file": "the file given with --template"}


class CommandError(Exception):
    """What the user gets told (the message says what to do); exit status 1."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("template", help="show the prompt the service gives a model and how it reads the reply "
                                        "(debug a chat template)")
    p.add_argument("model", help="catalog id, imported id, owner/repo[:QUANT] or .gguf path (as hearth run takes it)")
    p.add_argument("--template", metavar="FILE", help="a Jinja chat template to use instead of the model's")
    p.add_argument("--messages", metavar="FILE", help="JSON: a list of OpenAI chat messages, or a chat request "
                                                      "with 'messages' (default: one user turn, Hello)")
    p.add_argument("--tools", metavar="FILE", help="JSON: a list of OpenAI function tools")
    p.add_argument("--think", choices=["on", "off"],
                   help="thinking on or off (default: on, as the service renders unless a request turns it off)")
    p.add_argument("--parse", metavar="FILE", help="a raw reply of the model: print what the service returns for it")
    p.add_argument("--contract", action="store_true",
                   help="print only the output contract Hearth derived from the template")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    try:
        out, note = _run(args)
    except CommandError as e:
        print(f"hearth: {e}", file=sys.stderr)
        return 1
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:  # `hearth template ... | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
    if note:  # after the prompt, on a line of its own where both reach a terminal
        apart = "\n" if out and not out.endswith("\n") and sys.stdout.isatty() else ""
        print(apart + "\n".join(f"# {line}" for line in note.splitlines()), file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> tuple[str, str]:
    """(stdout, stderr) of the command."""
    from runtime.chat.chat_template import ChatTemplate, ChatTemplateError
    from runtime.chat.contract_summary import contract_dict, contract_lines
    from runtime.chat.template_analysis import contract_for

    template = _model_template(args)
    try:
        chat = ChatTemplate(template.source, template.bos, template.eos)
    except ChatTemplateError as e:
        raise CommandError(f"{e}; the template is {_ORIGINS[template.origin]}: fix it, or try another with "
                           "--template FILE") from None
    contract = contract_for(chat.source, chat.bos, chat.eos, chat.renderer)
    summary = _summary(template, contract_lines(contract))
    if args.contract:
        return (_dumps(contract_dict(contract)) if args.json else summary + "\n"), ""
    req, plan = _planned(args, contract)
    if args.parse:
        reply = _parsed(_read(args.parse, "--parse"), plan)
        return (_dumps(reply) if args.json else _reply_text(reply)), ("" if args.json else summary)
    prompt = _prompt(chat, req, plan, template.origin)
    if args.json:
        return _dumps({"prompt": prompt, "template": template.origin, "bos": chat.bos, "eos": chat.eos,
                       "contract": contract_dict(contract)}), ""
    return prompt, summary


def _model_template(args: argparse.Namespace) -> ModelTemplate:
    """The template the service would render the model with (``--template`` first)."""
    from runtime.chat.template_check import TemplateRefused, read_template_file
    from runtime.config import data_dir
    from runtime.store.gguf_file import InvalidModelFile
    from runtime.store.model_templates import template_for
    from runtime.store.resolve import UnknownModel, resolve_model

    try:
        given = read_template_file(args.template) if args.template else None
    except TemplateRefused as e:
        raise CommandError(f"--template: {e}") from None
    directory = data_dir()
    try:
        model = resolve_model(args.model, directory)
        return template_for(directory, model.id, model.path, given)
    except UnknownModel as e:
        raise CommandError(str(e)) from None
    except InvalidModelFile as e:
        raise CommandError(f"{e} (hearth template reads the chat template of a GGUF model)") from None
    except TemplateRefused as e:
        raise CommandError(str(e)) from None


def _summary(template: ModelTemplate, lines: list[str]) -> str:
    head = [f"template: {_ORIGINS[template.origin]}" if template.source is not None
            else "template: none in the model: the plain fallback (User: ... / Assistant:)",
            f"bos: {json.dumps(template.bos, ensure_ascii=False)}  eos: {json.dumps(template.eos, ensure_ascii=False)}"]
    return "\n".join(head + lines)


def _planned(args: argparse.Namespace, contract: OutputContract) -> tuple[GenerationRequest, OutputPlan | None]:
    """The request as the service's chat parser reads it, and its output plan (``plan_prompt``:
    the messages rewritten as the service rewrites them)."""
    from runtime.server.errors import ApiError
    from runtime.server.generate.tool_calls import plan_prompt
    from runtime.server.wire.openai.schemas import parse_chat

    messages = _read_json(args.messages, "--messages") if args.messages else DEFAULT_MESSAGES
    body: dict[str, Any] = dict(messages) if isinstance(messages, dict) else {"messages": messages}
    if args.tools:
        body["tools"] = _read_json(args.tools, "--tools")
    if args.think:
        body["enable_thinking"] = args.think == "on"
    try:
        req = parse_chat(body)
    except ApiError as e:
        where = "--tools" if e.param and str(e.param).startswith("tool") and args.tools else "--messages"
        raise CommandError(f"{where}: {e.message}") from None
    return req, plan_prompt(req, contract)


def _prompt(chat: ChatTemplate, req: GenerationRequest, plan: OutputPlan | None, origin: str) -> str:
    from runtime.chat.chat_template import ChatTemplateError
    from runtime.server.generate.generation import template_vars
    from runtime.server.generate.request import template_messages

    try:  # as the service submits the request and the worker renders it (``LlamaBackend.chat_text``)
        return chat.render(template_messages(req.messages) or [], **(template_vars(req, plan) or {}))
    except ChatTemplateError as e:
        raise CommandError(f"{e} (the template is {_ORIGINS[origin]}; the service answers such a request with a "
                           "400 chat_template_error)") from None


def _parsed(text: str, plan: OutputPlan | None) -> dict:
    """What the service returns for the raw reply ``text``."""
    from runtime.chat.events import ReasoningDelta, TextDelta
    from runtime.server.generate.reply import parser_for

    if plan is None:  # nothing to read: the reply is the answer as written
        return {"content": text, "reasoning": None, "tool_calls": []}
    parser = parser_for(plan)
    events = parser.feed(text) + parser.finish()
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    return {"content": "".join(e.text for e in events if isinstance(e, TextDelta)),
            "reasoning": reasoning or None,
            "tool_calls": [{"name": c["name"], "arguments": json.loads(c["arguments"] or "{}")}
                           for c in parser.calls]}


def _reply_text(reply: dict) -> str:
    parts = [f"content:\n{reply['content']}" if reply["content"] else "content: none"]
    if reply["reasoning"] is not None:
        parts.append(f"reasoning:\n{reply['reasoning']}")
    for i, call in enumerate(reply["tool_calls"]):
        parts.append(f"tool call {i + 1}: {call['name']}\n{json.dumps(call['arguments'], ensure_ascii=False)}")
    if not reply["tool_calls"]:
        parts.append("tool calls: none")
    return "\n\n".join(parts) + "\n"


def _read(path: str, option: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CommandError(f"{option}: {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"{option}: {path} cannot be read as UTF-8 text ({e})") from None


def _read_json(path: str, option: str) -> Any:
    text = _read(path, option)
    try:
        return json.loads(text)
    except ValueError as e:
        example = ('[{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}]'
                   if option == "--tools" else '[{"role": "user", "content": "Hello"}]')
        raise CommandError(f"{option}: {path} is not JSON ({e}); write e.g. {example}") from None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"
