"""Math in answers: ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]`` drawn as rich text with
Unicode symbols, sub- and superscripts, a/b fractions and √ roots; prices, escaped dollars, code
and a ``$$`` still streaming left as text; Copy still copies what the model wrote."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QTextFormat

from app.conversations import Message
from app.ui.latex import find_math, latex_html, latex_text
from app.ui.markdown import markdown_document
from app.ui.message_view import MessageWidget
from app.ui.rich_text import RichText

# LaTeX (inside its delimiters) -> the text it shows (tags dropped) and a piece of its HTML
RENDERED = [
    (r"E=mc^2", "E=mc2", "<i>E</i>=<i>mc</i><sup>2</sup>"),
    (r"\frac{a+b}{2}", "(a+b)/2", "(<i>a</i>+<i>b</i>)/2"),
    (r"\frac{1}{n}", "1/n", "1/<i>n</i>"),
    (r"\alpha_i", "αi", "α<sub><i>i</i></sub>"),
    (r"x^{y^z}", "xyz", "<sup><i>y</i><sup><i>z</i></sup></sup>"),
    (r"\sum_{i=1}^{n} i^2", "∑i=1n i2", "∑<sub><i>i</i>=1</sub><sup><i>n</i></sup>"),
    (r"\sqrt{x}", "√x", "√<i>x</i>"),
    (r"\overline{AB}", "A\u0305B\u0305", "<i>A\u0305B\u0305</i>"),  # a line over all of it
    (r"\sin\theta", "sin\u2009θ", "sin\u2009θ"),  # a function's name apart from its argument
    (r"\sin(x)", "sin(x)", "sin(<i>x</i>)"),
    (r"\sqrt{x+1}", "√(x+1)", "√(<i>x</i>+1)"),
    (r"\sqrt[3]{8}", "∛8", "∛8"),
    (r"\sqrt[n]{x}", "n√x", "<sup><i>n</i></sup>√<i>x</i>"),
    (r"\text{if } x \leq 0", "if x ≤ 0", "if <i>x</i> ≤ 0"),
    (r"\mathbf{v} \cdot \mathbf{w}", "v · w", "<b>v</b> · <b>w</b>"),
    (r"\mathrm{d}x", "dx", "d<i>x</i>"),
    (r"\left( \frac{1}{2} \right)", "( 1/2 )", "1/2"),
    (r"a \pm b \times c \neq d \approx e", "a ± b × c ≠ d ≈ e", "±"),
    (r"\forall x \in \mathbb{R}, \exists y", "∀ x ∈ ℝ, ∃ y", "ℝ"),
    (r"\int_0^\infty e^{-x}\,dx", "∫0∞ e−x\u2009dx", '<span style="white-space:pre">\u2009</span>'),
    (r"x \to \infty", "x → ∞", "→"),
    (r"\Gamma, \Omega, \partial, \nabla", "Γ, Ω, ∂, ∇", "Γ"),
    (r"a \quad b", "a\u2003b", "\u2003"),
    (r"\sin x + \log y", "sin x + log y", "sin <i>x</i>"),
    (r"\foo{x} + \bar{y}", "\\foo{x} + y\u0304", "\\foo{<i>x</i>}"),  # unknown: as written
    (r"a < b", "a < b", "&lt;"),
]


@pytest.mark.parametrize(("tex", "text", "markup"), RENDERED)
def test_latex_is_drawn_as_rich_text(tex, text, markup):
    assert latex_text(tex) == text
    assert markup in latex_html(tex)


# Markdown -> the math found in it: (LaTeX, display?)
FOUND = [
    ("Energy: $E=mc^2$.", [("E=mc^2", False)]),
    ("$$\\frac{a+b}{2}$$", [("\\frac{a+b}{2}", True)]),
    ("Then \\(\\alpha_i\\) and \\[x^2\\]", [("\\alpha_i", False), ("x^2", True)]),
    ("$$\nE=mc^2\n$$", [("\nE=mc^2\n", True)]),
    ("It costs $5 and $10.", []),  # prices
    ("From $5-$10 a month", []),
    ("Pay \\$5 now, $x$ later", [("x", False)]),  # an escaped dollar
    ("`$HOME` and `$x$` are code, $y$ is not", [("y", False)]),
    ("```sh\necho $PATH $x$\n```\n$z$", [("z", False)]),
    ("```\n$x$ in a fence still open", []),
    ("streaming $$\\frac{a}{b}", []),  # a $$ not closed yet
    ("streaming $$\\frac{a}{b}$", []),
    ("$x\n\ny$", []),  # not across paragraphs
    ("see \\[1\\]", []),  # a bracketed citation, not math
    ("$ 5$ and $x $", []),
]


@pytest.mark.parametrize(("markdown", "maths"), FOUND)
def test_math_is_found_where_a_model_writes_it(markdown, maths):
    assert [(m.tex, m.display) for m in find_math(markdown)] == maths


def _blocks(doc) -> list[str]:
    out, block = [], doc.begin()
    while block.isValid():
        out.append(block.text())
        block = block.next()
    return out


# Markdown -> the document's blocks
DOCUMENTS = [
    ("Energy: $E=mc^2$ costs $5 and $10.", ["Energy: E=mc2 costs $5 and $10."]),
    ("Mean:\n$$\n\\frac{a+b}{2}\n$$\nwhere $a_1$ is big.", ["Mean:", "(a+b)/2", "where a1 is big."]),
    ("Use `$x^2$` here, \\$5, and \\(\\alpha_i\\)", ["Use $x^2$ here, $5, and αi"]),
    ("Text\n\n    $x$ indented code", ["Text", "$x$ indented code"]),
    ("Still $$\\sum_i", ["Still $$\\sum_i"]),
    ("| f | value |\n|---|---|\n| $|x|$ | $\\pi$ |", ["", "f", "value", "|x|", "π", ""]),
]


@pytest.mark.parametrize(("markdown", "blocks"), DOCUMENTS)
def test_math_in_markdown_is_drawn_and_code_is_not(qapp, markdown, blocks):
    assert _blocks(markdown_document(markdown)) == blocks


def test_display_math_is_centred_and_larger_on_its_own_line(qapp):
    doc = markdown_document("So:\n$$x^2$$\nand $y$.")
    block = doc.begin().next()
    assert block.text() == "x2"
    assert block.blockFormat().alignment() & Qt.AlignmentFlag.AlignHCenter
    body = doc.defaultFont().pointSizeF()
    sizes = {it.fragment().charFormat().fontPointSize() for it in block}
    assert sizes and all(s > body for s in sizes)
    # inside a list item: its own line, not a block of its own
    doc = markdown_document("- so $$x^2$$ then")
    assert _blocks(doc) == ["so\u2028x2\u2028then"]


def test_superscripts_and_headings_keep_their_format(qapp):
    doc = markdown_document("# About $x^2$")
    fragments = [it.fragment() for it in doc.begin()]
    two = next(f for f in fragments if f.text() == "2")
    assert two.charFormat().verticalAlignment() == two.charFormat().VerticalAlignment.AlignSuperScript
    assert not two.charFormat().hasProperty(QTextFormat.Property.FontSizeAdjustment)
    assert two.charFormat().fontPointSize() == fragments[0].charFormat().fontPointSize()  # the heading's size


def test_a_message_with_math_shows_unicode_and_copies_what_was_written(qapp):
    source = "The area is $\\pi r^2$ and $$\\sum_{i=1}^{n} \\alpha_i \\leq \\infty$$ for $5."
    w = MessageWidget(Message(1, "assistant", source, {}))
    (text,) = [p for p in w.body.parts if isinstance(p, RichText)]
    shown = text.doc.toPlainText()
    assert "πr2" in shown.replace(" ", "") and "∑i=1n αi ≤ ∞" in shown and "$5" in shown
    assert "\\pi" not in shown and "$$" not in shown
    assert text.text() == source  # the widget keeps the source
    text.select_all()
    assert "π" in text.selected_text()  # a selection copies what is shown
    w.copy_button.click()
    assert QGuiApplication.clipboard().text() == source  # Copy copies what the model wrote
