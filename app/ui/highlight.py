"""Syntax colours for code blocks: Pygments where it is installed, plain text otherwise."""

from __future__ import annotations

import functools
import html
import threading

#: languages whose lexers are compiled ahead (the first use of a lexer compiles its regular
#: expressions: about 130 ms for Python here, too long for the window's event loop)
COMMON = ("python", "javascript", "typescript", "bash", "json", "c", "cpp", "rust", "go", "java", "html", "sql")
#: guessing a fence's language runs every lexer's detector over the code: only short code is guessed
GUESS_CHARS = 2000
_warm = threading.Event()


def warm_up() -> None:
    """Compile the common lexers on a thread, once, before the first code block needs them."""
    if _warm.is_set():
        return
    _warm.set()

    def work() -> None:
        for lang in COMMON:
            highlight_html("x = 1", lang, False)
    threading.Thread(target=work, name="lexer-warm-up", daemon=True).start()


@functools.lru_cache(maxsize=256)
def highlight_html(code: str, language: str, dark: bool) -> str:
    """``code`` as HTML spans with inline colours (a QLabel keeps inline styles only); the last
    few hundred blocks are remembered (a block scrolled back into view is not coloured again)."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import TextLexer, get_lexer_by_name, guess_lexer
        from pygments.util import ClassNotFound
    except ImportError:
        return html.escape(code)
    try:
        if language:
            lexer = get_lexer_by_name(language)
        else:
            lexer = guess_lexer(code) if len(code) <= GUESS_CHARS else TextLexer()
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
