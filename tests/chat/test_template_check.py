"""A replacement chat template is read with a size cap and must render the probe conversation."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.chat.template_check import MAX_TEMPLATE_BYTES, TemplateRefused, check_template, read_template_file

TEMPLATES = Path(__file__).parent / "templates"


@pytest.mark.parametrize("name", sorted(p.stem for p in TEMPLATES.glob("*.jinja")))
def test_the_reference_templates_pass(name):
    prompt = check_template((TEMPLATES / f"{name}.jinja").read_text(), "<s>", "</s>")
    assert "What is two plus two?" in prompt


@pytest.mark.parametrize("source, said", [
    ("", "the template is empty"),
    ("{% for m in messages %}{{ m.content }", "not valid Jinja (line 1"),
    ("{{ raise_exception('only one turn, please') }}", "refused the conversation: only one turn, please"),
    ("{{ messages[9].content.upper() }}", "failed on this conversation"),
    ("<|im_start|>assistant\n", "leaves the conversation out"),
    ("x" * (MAX_TEMPLATE_BYTES + 1), "over 256 KiB"),
])
def test_a_template_that_cannot_stand_in_is_refused_with_the_reason(source, said):
    with pytest.raises(TemplateRefused) as e:
        check_template(source)
    assert said in str(e.value)


def test_a_template_file_that_cannot_be_read_says_why(tmp_path):
    with pytest.raises(TemplateRefused, match="does not exist"):
        read_template_file(tmp_path / "none.jinja")
    (tmp_path / "bin.jinja").write_bytes(b"\xff\xfe{{ x }}")
    with pytest.raises(TemplateRefused, match="not UTF-8 text"):
        read_template_file(tmp_path / "bin.jinja")
    (tmp_path / "big.jinja").write_text("x" * (MAX_TEMPLATE_BYTES + 1))
    with pytest.raises(TemplateRefused, match="is it the right file"):
        read_template_file(tmp_path / "big.jinja")
    with pytest.raises(TemplateRefused, match="cannot be read"):
        read_template_file(tmp_path)
    (tmp_path / "ok.jinja").write_text("{{ messages[-1].content }}")
    assert read_template_file(tmp_path / "ok.jinja") == "{{ messages[-1].content }}"
