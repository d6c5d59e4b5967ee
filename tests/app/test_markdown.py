"""Markdown as the chat and the model card show it: CommonMark's line breaks, and headings sized
relative to the text."""

from __future__ import annotations

from PySide6.QtGui import QFont, QTextFormat

from app.ui.hub_browser import CardText
from app.ui.markdown import HEADING_SCALE, markdown_document


def _blocks(doc) -> list[str]:
    out, block = [], doc.begin()
    while block.isValid():
        out.append(block.text())
        block = block.next()
    return out


def _lines(doc) -> list[str]:
    """The document's lines: blocks, split at line separators (a hard break inside a block)."""
    return [line for b in _blocks(doc) for line in b.split("\u2028")]


def test_a_single_newline_is_a_soft_break(qapp):
    doc = markdown_document("The answer was wrapped\nat some column by the model\nand reads as one line.")
    assert _lines(doc) == ["The answer was wrapped at some column by the model and reads as one line."]


def test_two_spaces_or_a_backslash_break_the_line(qapp):
    doc = markdown_document("Roses are red,  \nviolets are blue,\\\nsugar is sweet")
    assert _lines(doc) == ["Roses are red,", "violets are blue,", "sugar is sweet"]


def test_code_blocks_keep_their_lines(qapp):
    doc = markdown_document("Run:\n\n```python\nimport os\nprint(os.getcwd())\n```\n\n    indented\n    code")
    lines = _lines(doc)
    assert lines[0] == "Run:"
    assert "import os" in lines and "print(os.getcwd())" in lines
    assert "indented" in lines and "code" in lines


def test_paragraphs_and_lists_stay_apart(qapp):
    doc = markdown_document("First paragraph\nstill first.\n\nSecond.\n\n- one\n- two")
    assert _lines(doc) == ["First paragraph still first.", "Second.", "one", "two"]


def _heading_sizes(doc) -> dict[int, float]:
    out, block = {}, doc.begin()
    while block.isValid():
        level = block.blockFormat().headingLevel()
        if level:
            frag = next(iter(block)).fragment()
            out[level] = frag.charFormat().font().pointSizeF()
            assert not frag.charFormat().hasProperty(QTextFormat.Property.FontSizeAdjustment)
        block = block.next()
    return out


def test_headings_are_sized_relative_to_the_text(qapp):
    font = QFont()
    font.setPointSizeF(10)
    doc = markdown_document("# One\n\n## Two\n\n### Three\n\n#### Four\n\nBody text.", font)
    sizes = _heading_sizes(doc)
    assert sizes == {1: 10 * HEADING_SCALE[1], 2: 10 * HEADING_SCALE[2], 3: 10 * HEADING_SCALE[3], 4: 10}
    assert sizes[1] <= 14, "an H1 is no poster"


def test_the_model_cards_headings_are_sized_relative_to_the_text(qtbot):
    card = CardText()
    qtbot.addWidget(card)
    font = card.font()
    font.setPointSizeF(9)
    card.setFont(font)
    card.show_markdown("# SmolLM2\n\nQuantized builds.\n\n## Which file?\n\nQ4_K_M.")
    assert _heading_sizes(card.document()) == {1: 9 * HEADING_SCALE[1], 2: 9 * HEADING_SCALE[2]}
    font.setPointSizeF(12)
    card.setFont(font)  # a new text size: the headings follow
    assert _heading_sizes(card.document()) == {1: 12 * HEADING_SCALE[1], 2: 12 * HEADING_SCALE[2]}
