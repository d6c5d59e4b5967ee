"""``hearth template``: the prompt the worker renders, replies read as the service reads them, the
derived contract, and errors (and a closed pipe) that end without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).parent / "chat" / "templates"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello! How can I help?"},
                {"role": "user", "content": "What is the weather in Paris?"}]


def hearth(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.cli", "template", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps(CONVERSATION))
    (tmp_path / "t.json").write_text(json.dumps(TOOLS))
    return tmp_path


def test_the_prompt_is_what_the_worker_renders(smollm2_path, files):
    from runtime.backends.llama import ContextConfig, LlamaBackend

    r = hearth("smollm2-135m", "--messages", str(files / "m.json"))
    assert r.returncode == 0, r.stderr
    backend = LlamaBackend(smollm2_path, ContextConfig(n_ctx=256, n_seq_max=1, n_batch=32))
    try:  # as the service submits a chat request without tools: thinking on, nothing else
        expected, _ = backend.chat_text(CONVERSATION, enable_thinking=True)
        bos, eos = backend.chat_template.bos, backend.chat_template.eos
    finally:
        backend.close()
    assert r.stdout == expected
    assert "# template: the model's own" in r.stderr
    assert f"# bos: {json.dumps(bos)}  eos: {json.dumps(eos)}" in r.stderr
    assert "# tool calls: the template renders none" in r.stderr


def test_tools_go_into_the_system_message_of_a_template_that_does_not_describe_them(smollm2_path, files):
    r = hearth("smollm2-135m", "--messages", str(files / "m.json"), "--tools", str(files / "t.json"))
    assert r.returncode == 0, r.stderr
    system = r.stdout.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n") and '"name": "get_weather"' in system
    assert '{"tool_calls": [' in system  # the example call in the fallback shape the grammar enforces


@pytest.mark.parametrize("template, reply, reasoning", [
    ("Qwen3-Coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", None),
    ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant"
                            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                            '{"city": "Paris", "days": 3}<|call|>', "The user wants the weather."),
    ("deepseek-ai-DeepSeek-V3.1", "The user wants the weather.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
                                  'get_weather<｜tool▁sep｜>{"city": "Paris", "days": 3}<｜tool▁call▁end｜>'
                                  "<｜tool▁calls▁end｜>", "The user wants the weather."),
    ("GLM-4.7-Flash", "The user wants the weather.</think><tool_call>get_weather<arg_key>city</arg_key>"
                      "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
     "The user wants the weather."),
])
def test_a_reply_is_read_as_the_service_returns_it(smollm2_path, files, template, reply, reasoning):
    (files / "reply.txt").write_text(reply)
    r = hearth("smollm2-135m", "--template", str(TEMPLATES / f"{template}.jinja"), "--messages",
               str(files / "m.json"), "--tools", str(files / "t.json"), "--parse", str(files / "reply.txt"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"content": "", "reasoning": reasoning,
                                    "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]}
    assert r.stderr == ""


def test_thinking_opened_by_the_prompt_follows_think(smollm2_path, files):
    deepseek = str(TEMPLATES / "deepseek-ai-DeepSeek-V3.1.jinja")
    (files / "reply.txt").write_text("Two and two.</think>It is 4.")
    on = hearth("smollm2-135m", "--template", deepseek, "--parse", str(files / "reply.txt"), "--json")
    off = hearth("smollm2-135m", "--template", deepseek, "--think", "off", "--parse", str(files / "reply.txt"),
                 "--json")
    assert json.loads(on.stdout) == {"content": "It is 4.", "reasoning": "Two and two.", "tool_calls": []}
    assert json.loads(off.stdout)["reasoning"] is None  # not opened: the text is the model's answer
    prompt_on = hearth("smollm2-135m", "--template", deepseek).stdout
    prompt_off = hearth("smollm2-135m", "--template", deepseek, "--think", "off").stdout
    assert prompt_on.endswith("<think>") and prompt_off.endswith("</think>")


def test_the_contract_shows_the_markers_derived_from_the_template(smollm2_path):
    r = hearth("smollm2-135m", "--template", str(TEMPLATES / "Qwen3-Coder.jinja"), "--contract", "--json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert c["calls"]["body"] == "tagged" and "<function=" in c["calls"]["name_prefix"]
    assert c["calls"]["arg_prefix"].strip() == "<parameter=" and c["native_tools"] is True
    text = hearth("smollm2-135m", "--template", str(TEMPLATES / "GLM-4.7-Flash.jinja"), "--contract")
    assert 'reasoning: "<think>" ... "</think>"; the prompt opens it when thinking is on' in text.stdout
    assert "tool calls: tagged body" in text.stdout and '"<arg_key>"' in text.stdout


def test_a_model_without_a_template_gets_the_plain_fallback(gemma_path, files):
    r = hearth("gemma-3-270m", "--messages", str(files / "m.json"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("Be brief.\n\nUser: Hi\nAssistant: Hello! How can I help?\n"
                        "User: What is the weather in Paris?\nAssistant:")
    assert "the plain fallback" in r.stderr


def test_the_override_stored_for_a_model_is_used(smollm2_path, tmp_path, data_dir):
    from runtime.store.model_templates import remove_template, store_template

    model = tmp_path / "copy.gguf"  # its own id (the path), so no other test sees the override
    model.symlink_to(smollm2_path)
    hermes = (TEMPLATES / "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja").read_text()
    store_template(data_dir, str(model), hermes)
    try:
        r = hearth(str(model), "--contract", "--json")
        assert json.loads(r.stdout)["calls"]["call_start"] == "<tool_call>\n"
        assert "# template: the override stored for this model" in hearth(str(model)).stderr
    finally:
        remove_template(data_dir, str(model))
    assert json.loads(hearth(str(model), "--contract", "--json").stdout)["calls"] is None


@pytest.mark.parametrize("args, said", [
    (["no-such-model"], "unknown model 'no-such-model'"),
    (["smollm2-135m", "--messages", "{tmp}/bad.json"], "--messages: {tmp}/bad.json is not JSON"),
    (["smollm2-135m", "--messages", "{tmp}/none.json"], "--messages: {tmp}/none.json does not exist"),
    (["smollm2-135m", "--messages", "{tmp}/t.json"], "--messages: messages[0] must be"),
    (["smollm2-135m", "--tools", "{tmp}/m.json"], "--tools: "),
    (["smollm2-135m", "--template", "{tmp}/broken.jinja"], "not valid Jinja (line 1"),
    (["smollm2-135m", "--template", "{tmp}/raises.jinja"], "refused the conversation: no weather questions"),
])
def test_errors_say_what_is_wrong_without_a_traceback(smollm2_path, files, args, said):
    (files / "bad.json").write_text("[{")
    (files / "broken.jinja").write_text("{% for m in messages %}{{ m.content }")
    (files / "raises.jinja").write_text("{% for m in messages %}{% if 'Paris' in m.content %}{{ raise_exception("
                                        "'no weather questions') }}{% endif %}{{ m.content }}{% endfor %}")
    args = [a.replace("{tmp}", str(files)) for a in args]
    if "--template" in args:
        args += ["--messages", str(files / "m.json")]
    r = hearth(*args)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("hearth: ") and said.replace("{tmp}", str(files)) in r.stderr, r.stderr


def test_a_pipe_closed_early_ends_quietly(smollm2_path, tmp_path):
    """``hearth template ... | head -1``: the reader leaves after a line of a long prompt."""
    (tmp_path / "long.json").write_text(json.dumps([{"role": "user", "content": "word\n" * 100_000}]))
    p = subprocess.Popen([sys.executable, "-m", "runtime.cli", "template", "smollm2-135m", "--messages",
                          str(tmp_path / "long.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline() == b"<|im_start|>system\n"  # SmolLM2's template writes a system turn first
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(60) == 0 and "Traceback" not in err and "BrokenPipeError" not in err, err


def test_llama_cpp_is_not_imported(smollm2_path, files):
    code = ("import sys; from runtime.cli import main; "
            f"rc = main(['template', 'smollm2-135m', '--tools', {str(files / 't.json')!r}]); "
            "assert 'llama_cpp' not in sys.modules, 'llama_cpp imported'; sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
