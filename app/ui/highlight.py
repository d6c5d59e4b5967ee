"""Syntax colours for code blocks: Pygments where it is installed, plain text otherwise."""

from __future__ import annotations

import html


def highlight_html(code: str, language: str, dark: bool) -> str:
    """``code`` as HTML spans with inline colours (a QLabel keeps inline styles only)."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import TextLexer, get_lexer_by_name, guess_lexer
        from pygments.util import ClassNotFound
    except ImportError:
        return html.escape(code)
    try:
        lexer = get_lexer_by_name(language) if language else guess_lexer(code)
    except ClassNotFound:
        lexer = TextLexer()
    fmt = HtmlFormatter(noclasses=True, nowrap=True, style="monokai" if dark else "friendly")
    return highlight(code, lexer, fmt).rstrip("\n")


def split_fences(text: str) -> list[tuple[str, str, str]]:
    """Markdown cut into ("text", "", markdown) and ("code", language, code) pieces; a fence
    still open (an answer streaming) runs to the end."""
    out: list[tuple[str, str, str]] = []
    buf: list[str] = []
    lang, fence = "", None
    for line in text.split("\n"):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            if buf:
                out.append(("text", "", "\n".join(buf)))
            buf, fence, lang = [], stripped[:3], stripped[3:].strip().split(" ")[0]
        elif fence is not None and stripped.startswith(fence):
            out.append(("code", lang, "\n".join(buf)))
            buf, fence, lang = [], None, ""
        else:
            buf.append(line)
    if fence is not None:
        out.append(("code", lang, "\n".join(buf)))
    elif buf and "\n".join(buf).strip():
        out.append(("text", "", "\n".join(buf)))
    return out


def as_json(text: str) -> str | None:
    """A structured (JSON) answer pretty-printed; None when the answer is not one JSON value."""
    import json

    t = text.strip()
    if not t or t[0] not in "{[":
        return None
    try:
        return json.dumps(json.loads(t), indent=2, ensure_ascii=False)
    except ValueError:
        return None
