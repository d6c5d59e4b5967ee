"""Math in an answer: finding ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]`` in Markdown, and
drawing the common LaTeX subset as Qt rich text (Unicode symbols, ``<sup>``/``<sub>``, a/b for
fractions, √ for roots). No web engine, no TeX: what the subset does not know is shown as written.

``find_math`` leaves code (spans and fences) alone, reads ``$5 and $10`` as prices (an opening
``$`` is not followed by a space; a closing one has no space before it and no digit after it),
keeps ``\\$`` a dollar, and finds nothing in a ``$$`` that is still open (an answer streaming).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

SYMBOLS = {
    # Greek
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ϵ", "varepsilon": "ε", "zeta": "ζ",
    "eta": "η", "theta": "θ", "vartheta": "ϑ", "iota": "ι", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν",
    "xi": "ξ", "omicron": "ο", "pi": "π", "varpi": "ϖ", "rho": "ρ", "varrho": "ϱ", "sigma": "σ", "varsigma": "ς",
    "tau": "τ", "upsilon": "υ", "phi": "ϕ", "varphi": "φ", "chi": "χ", "psi": "ψ", "omega": "ω",
    "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ", "Pi": "Π", "Sigma": "Σ",
    "Upsilon": "Υ", "Phi": "Φ", "Psi": "Ψ", "Omega": "Ω",
    # operators and relations
    "infty": "∞", "pm": "±", "mp": "∓", "times": "×", "cdot": "·", "div": "÷", "ast": "∗", "star": "⋆",
    "circ": "∘", "bullet": "∙", "oplus": "⊕", "otimes": "⊗", "leq": "≤", "le": "≤", "geq": "≥", "ge": "≥",
    "neq": "≠", "ne": "≠", "approx": "≈", "equiv": "≡", "sim": "∼", "simeq": "≃", "cong": "≅", "propto": "∝",
    "ll": "≪", "gg": "≫", "to": "→", "rightarrow": "→", "leftarrow": "←", "gets": "←", "leftrightarrow": "↔",
    "Rightarrow": "⇒", "Leftarrow": "⇐", "Leftrightarrow": "⇔", "implies": "⟹", "impliedby": "⟸", "iff": "⟺",
    "mapsto": "↦", "uparrow": "↑", "downarrow": "↓", "longrightarrow": "⟶", "longleftarrow": "⟵",
    "sum": "∑", "prod": "∏", "coprod": "∐", "int": "∫", "iint": "∬", "iiint": "∭", "oint": "∮",
    "partial": "∂", "nabla": "∇", "in": "∈", "notin": "∉", "ni": "∋", "subset": "⊂", "subseteq": "⊆",
    "supset": "⊃", "supseteq": "⊇", "cup": "∪", "cap": "∩", "setminus": "∖", "emptyset": "∅",
    "varnothing": "∅", "forall": "∀", "exists": "∃", "nexists": "∄", "neg": "¬", "lnot": "¬", "land": "∧",
    "wedge": "∧", "lor": "∨", "vee": "∨", "perp": "⊥", "parallel": "∥", "mid": "∣", "angle": "∠",
    "triangle": "△", "degree": "°", "prime": "′", "ldots": "…", "cdots": "⋯", "vdots": "⋮", "ddots": "⋱",
    "dots": "…", "hbar": "ħ", "ell": "ℓ", "Re": "ℜ", "Im": "ℑ", "aleph": "ℵ", "langle": "⟨", "rangle": "⟩",
    "lceil": "⌈", "rceil": "⌉", "lfloor": "⌊", "rfloor": "⌋", "vert": "|", "Vert": "‖", "|": "‖",
    "therefore": "∴", "because": "∵", "top": "⊤", "bot": "⊥", "vdash": "⊢", "models": "⊨",
    "lbrace": "{", "rbrace": "}", "{": "{", "}": "}", "$": "$", "%": "%", "&": "&", "#": "#", "_": "_",
    "backslash": "\\",
}

#: spacing commands, as Unicode spaces
SPACES = {",": "\u2009", ":": "\u2005", ">": "\u2005", ";": "\u2004", " ": " ", "!": "", "quad": "\u2003",
          "qquad": "\u2003\u2003", "enspace": "\u2002", "thinspace": "\u2009"}

#: named functions, set upright
FUNCTIONS = {"sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
             "log", "ln", "lg", "exp", "lim", "liminf", "limsup", "max", "min", "sup", "inf", "det", "dim",
             "ker", "gcd", "deg", "arg", "Pr", "mod", "bmod"}

#: accents over the whole argument (a line over every character), the others over its first
WIDE_ACCENTS = {"overline", "widehat", "widetilde"}
#: accents, as combining marks after the (first) character
ACCENTS = {"hat": "\u0302", "widehat": "\u0302", "bar": "\u0304", "overline": "\u0305", "vec": "\u20d7",
           "dot": "\u0307", "ddot": "\u0308", "tilde": "\u0303", "widetilde": "\u0303"}

#: sizing that changes nothing here: the delimiter after it is shown as is
DROPPED = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr",
           "middle", "displaystyle", "textstyle", "limits", "nolimits", "nonumber", "notag"}

#: environments whose rows are just lines here
PLAIN_ENVIRONMENTS = {"aligned", "align", "align*", "gathered", "gather", "gather*", "equation", "equation*",
                      "split", "multline", "eqnarray"}

DOUBLE_STRUCK = {"C": "ℂ", "H": "ℍ", "N": "ℕ", "P": "ℙ", "Q": "ℚ", "R": "ℝ", "Z": "ℤ"}

_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_FENCE = re.compile(r"(?m)^ {0,3}(`{3,}|~{3,})")
_TOKEN = re.compile(r"\\([A-Za-z]+\*?|.)|(\s+)|(.)", re.DOTALL)


@dataclass(frozen=True)
class Math:
    """One piece of math in Markdown: ``text[start:end]`` is the whole of it, delimiters included."""

    start: int
    end: int
    tex: str
    display: bool


# finding math in Markdown

def find_math(text: str) -> list[Math]:
    """The math in ``text``, in order; code spans, fenced code and escaped dollars are skipped."""
    out: list[Math] = []
    i, n = 0, len(text)
    no_close_before = 0
    while i < n:
        c = text[i]
        if c in "`~" and _line_start(text, i):
            m = _FENCE.match(text, _line_begin(text, i))
            if m:
                i = _fence_end(text, m)
                continue
        if c == "`":
            run = _run(text, i, "`")
            close = _closing_ticks(text, i + run, run)
            i = close if close is not None else i + run
            continue
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt in "([":
                closer = "\\)" if nxt == "(" else "\\]"
                end = _find_closer(text, i + 2, closer)
                if end is not None:
                    tex = text[i + 2:end]
                    if tex.strip() and not (nxt == "[" and re.fullmatch(r"[\d\s,.]*", tex)):  # \[1\]: a citation
                        out.append(Math(i, end + 2, tex, nxt == "["))
                        i = end + 2
                        continue
            i += 2
            continue
        if c == "$":
            if text.startswith("$$", i):
                end = _find_closer(text, i + 2, "$$")
                if end is not None and text[i + 2:end].strip():
                    out.append(Math(i, end + 2, text[i + 2:end], True))
                    i = end + 2
                else:
                    i += 2
                continue
            end = None
            if i >= no_close_before:
                end, stop = _inline_dollar_end(text, i)
                if end is None:
                    # no closing $ up to ``stop``: none for a $ opened before it either
                    no_close_before = stop
            if end is not None:
                out.append(Math(i, end + 1, text[i + 1:end], False))
                i = end + 1
                continue
        i += 1
    return out


def _line_begin(text: str, i: int) -> int:
    return text.rfind("\n", 0, i) + 1


def _line_start(text: str, i: int) -> bool:
    return not text[_line_begin(text, i):i].strip(" ")


def _run(text: str, i: int, ch: str) -> int:
    j = i
    while j < len(text) and text[j] == ch:
        j += 1
    return j - i


def _fence_end(text: str, opening: re.Match[str]) -> int:
    """Where fenced code that ``opening`` starts ends: after its closing fence, or the text's end."""
    mark = opening.group(1)
    line_end = text.find("\n", opening.end())
    if line_end < 0:
        return len(text)
    close = re.compile(r"(?m)^ {0,3}" + re.escape(mark[0]) + "{" + str(len(mark)) + r",}[ \t]*$")
    m = close.search(text, line_end + 1)
    return m.end() if m else len(text)


def _closing_ticks(text: str, i: int, run: int) -> int | None:
    """The end of the run of exactly ``run`` backticks that closes a code span, or None."""
    while True:
        j = text.find("`" * run, i)
        if j < 0:
            return None
        k = _run(text, j, "`")
        if k == run:
            return j + run
        i = j + k


def _find_closer(text: str, i: int, closer: str) -> int | None:
    """Where ``closer`` starts after ``i``, stepping over ``\\x`` pairs; None past a blank line."""
    n = len(text)
    while i < n:
        if text.startswith(closer, i):
            return i
        if text[i] == "\n" and _BLANK_LINE.match(text, i):
            return None
        i += 2 if text[i] == "\\" else 1
    return None


def _inline_dollar_end(text: str, i: int) -> tuple[int | None, int]:
    """The closing ``$`` of ``$...$`` opened at ``i`` (None for a price, a lone dollar), and where
    the search stopped."""
    n = len(text)
    if i + 1 >= n or text[i + 1].isspace():
        return None, i
    j = i + 1
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "\n" and _BLANK_LINE.match(text, j):
            return None, j
        if c == "`":
            return None, j  # a code span starts before the math would close
        if c == "$" and not text[j - 1].isspace() and not (j + 1 < n and text[j + 1].isdigit()):
            return j, j
        j += 1
    return None, n


# LaTeX to rich text

def latex_html(tex: str) -> str:
    """``tex`` (the inside of the delimiters) as Qt rich-text HTML."""
    tokens = [(m.group(1), m.group(2), m.group(3)) for m in _TOKEN.finditer(tex)]
    return _Parser(tokens).group(until_brace=False).strip(" ")


def latex_text(tex: str) -> str:
    """``tex`` as the plain text its HTML shows (tags dropped): what a test or a reader checks."""
    return plain(latex_html(tex))


def plain(markup: str) -> str:
    return html.unescape(re.sub(r"<br\s*/?>", "\n", re.sub(r"<(?!br)[^>]*>", "", markup)))


_ATOM = re.compile(r"[\w.′\u0300-\u036f\u20d7]+|√?\(.*\)|[∛∜√][\w.]+|[^\w\s]")


def _wrapped(markup: str) -> str:
    """``markup`` in parentheses where it is compound (``a+b``), as is where it is one token."""
    return markup if _ATOM.fullmatch(plain(markup)) else f"({markup})"


class _Parser:
    def __init__(self, tokens: list[tuple[str | None, str | None, str | None]]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> tuple[str | None, str | None, str | None] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def skip_space(self) -> None:
        while (t := self.peek()) is not None and t[1] is not None:
            self.i += 1

    def group(self, until_brace: bool) -> str:
        """Items up to the closing ``}`` (consumed) or the end."""
        out: list[str] = []
        while (t := self.peek()) is not None:
            if until_brace and t[2] == "}":
                self.i += 1
                break
            out.append(self.item())
        return _merge_italics(_collapse_spaces("".join(out)))

    def argument(self) -> str | None:
        """The next argument: a ``{group}`` or one token; None at the end."""
        self.skip_space()
        t = self.peek()
        if t is None:
            return None
        if t[2] == "{":
            self.i += 1
            return self.group(until_brace=True)
        return self.item()

    def raw_argument(self) -> str | None:
        """The source of the next ``{group}`` as written (for ``\\text``), or None."""
        self.skip_space()
        t = self.peek()
        if t is None or t[2] != "{":
            return None
        self.i += 1
        depth, parts = 1, []
        while (t := self.peek()) is not None:
            self.i += 1
            cmd, space, ch = t
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    break
            parts.append(("\\" + cmd) if cmd is not None else (space or ch or ""))
        return "".join(parts)

    def optional(self) -> str | None:
        """An optional ``[argument]`` (``\\sqrt[3]``), or None."""
        t = self.peek()
        if t is None or t[2] != "[":
            return None
        self.i += 1
        out: list[str] = []
        while (t := self.peek()) is not None and t[2] != "]":
            out.append(self.item())
        self.i += 1
        return "".join(out)

    def item(self) -> str:
        cmd, space, ch = self.tokens[self.i]
        self.i += 1
        if space is not None:
            return " "
        if cmd is not None:
            return self.command(cmd)
        assert ch is not None
        if ch in "^_":
            arg = self.argument()
            tag = "sup" if ch == "^" else "sub"
            return f"<{tag}>{arg}</{tag}>" if arg else html.escape(ch)
        if ch == "{":
            return self.group(until_brace=True)
        if ch == "}":
            return ""  # a stray closing brace
        if ch == "&":
            return " "
        if ch == "~":
            return "\u00a0"
        if ch == "-":
            return "−"
        if ch == "'":
            return "′"
        if ch.isascii() and ch.isalpha():
            return f"<i>{ch}</i>"
        return html.escape(ch)

    def command(self, name: str) -> str:
        if name in SYMBOLS:
            return html.escape(SYMBOLS[name])
        if name in SPACES:
            return _space(SPACES[name])
        if name == "\\":
            return "<br/>"
        if name in FUNCTIONS:  # upright, and apart from what it applies to (sin θ, log x)
            t = self.peek()
            apart = t is not None and t[1] is None and not (t[2] is not None and t[2] in "^_({[|")
            return name + ("\u2009" if apart else "")
        if name in DROPPED:
            t = self.peek()
            if name in ("left", "right", "middle") and t is not None and t[2] == ".":
                self.i += 1
            return ""
        if name in ("frac", "dfrac", "tfrac", "cfrac"):
            num, den = self.argument() or "", self.argument() or ""
            return f"{_wrapped(num)}/{_wrapped(den)}"
        if name == "sqrt":
            index = self.optional()
            body = self.argument() or ""
            root = {"3": "∛", "4": "∜"}.get(plain(index or "").strip(), "√")
            if index and root == "√":
                root = f"<sup>{index}</sup>√"
            return root + _wrapped(body)
        if name in ("text", "textrm", "textup", "mbox", "operatorname", "textnormal"):
            raw = self.raw_argument()
            return html.escape(_unescape_text(raw)) if raw is not None else html.escape("\\" + name)
        if name in ("mathrm", "rm", "mathsf", "mathtt"):
            return _upright(self.argument() or "")
        if name in ("mathbf", "textbf", "boldsymbol", "bm", "bf"):
            arg = self.argument() or ""
            return f"<b>{arg if name in ('boldsymbol', 'bm') else _upright(arg)}</b>"
        if name in ("mathit", "textit", "emph", "it"):
            return f"<i>{_upright(self.argument() or '')}</i>"
        if name == "mathbb":
            arg = plain(self.argument() or "")
            return html.escape("".join(DOUBLE_STRUCK.get(c, c) for c in arg))
        if name in ("mathcal", "mathscr", "mathfrak"):
            return self.argument() or ""
        if name in ACCENTS:
            arg = self.argument() or ""
            return _accented(arg, ACCENTS[name], every=name in WIDE_ACCENTS)
        if name in ("begin", "end"):
            env = self.raw_argument()
            if env in PLAIN_ENVIRONMENTS:
                return ""
            return html.escape(f"\\{name}" + (f"{{{env}}}" if env is not None else ""))
        # unknown: as written, with the braces of its arguments
        out = html.escape("\\" + name)
        while (t := self.peek()) is not None and t[2] == "{":
            self.i += 1
            out += "{" + self.group(until_brace=True) + "}"
        return out


def _space(chars: str) -> str:
    """Spacing that rich text keeps (it folds Unicode spaces into one space, as HTML does)."""
    return f'<span style="white-space:pre">{chars}</span>' if chars.strip() == "" and chars not in ("", " ") else chars


_SPACE_RUN = re.compile(r'(?: |<span style="white-space:pre">[^<]*</span>){2,}')


def _collapse_spaces(markup: str) -> str:
    """Spaces as written in the source count once, and not at all beside ``\\,`` or ``\\quad``
    (math ignores the source's spaces; most answers space their formulas as they mean them)."""
    def one(m: re.Match[str]) -> str:
        run = m.group(0)
        kept = run.replace(" <", "<").replace("> ", ">")
        return kept.strip(" ") if "<span" in run else " "
    return _SPACE_RUN.sub(one, markup)


def _unescape_text(raw: str) -> str:
    return re.sub(r"\\([{}$%&#_ ])", r"\1", raw)


def _upright(markup: str) -> str:
    return re.sub(r"</?i>", "", markup)


def _merge_italics(markup: str) -> str:
    """``<i>m</i><i>c</i>`` as ``<i>mc</i>``."""
    return markup.replace("</i><i>", "")


def _accented(markup: str, mark: str, every: bool = False) -> str:
    """``markup`` with ``mark`` after its first visible character (``every``: after each one
    outside tags and entities, a line over all of it)."""
    if every:
        return re.sub(r"(<[^>]*>|&[^;]*;)|([^<&\s])", lambda m: m.group(1) or m.group(2) + mark, markup)
    m = re.search(r"(?:^|>)([^<&])", markup)
    if not m:
        return markup + mark
    at = m.end(1)
    return markup[:at] + mark + markup[at:]
