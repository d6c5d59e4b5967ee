"""The Python agent frameworks against a live Hearth, unmodified, as their users first use them.

Each test does what a framework's getting-started page does: a plain completion, a tool call
round and structured output where the framework has them. What is checked is the protocol: no
exception from the framework about the server's answer, no non-2xx, a tool call the framework
parsed, an output object its validation accepted. The 135M model's choices are not judged.
A framework whose package is not installed is skipped with the reason.
"""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from runtime.server.launcher import ServiceProcess

MODEL = "smollm2-135m"
#: the machine may be loaded: a framework's client must never give up before the server answers
TIMEOUT = 300.0
MAX_TOKENS = 48


class Weather(BaseModel):
    """A small output type: an enum and a bounded string, so a reply fits in MAX_TOKENS."""

    sky: Literal["sunny", "rainy", "cloudy"]
    city: str = Field(max_length=12)


def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"It is sunny in {city}."


ASK = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = ServiceProcess("--parallel", "2", "--ctx", "8192", "--max-tokens-limit", "64").wait_ready()
    yield s
    s.stop()


def _pkg(name: str, install: str):
    return pytest.importorskip(name, reason=f"{install} is not installed (pip install {install})")


# ---------------------------------------------------------------------------------------- openai-agents


def test_openai_agents_tool_round_and_output_type(server):
    agents = _pkg("agents", "openai-agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=TIMEOUT, max_retries=0)
    model = agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    called: list[str] = []

    @agents.function_tool
    def weather(city: str) -> str:
        """The current weather in a city."""
        called.append(city)
        return get_weather(city)

    settings = agents.ModelSettings(temperature=0, max_tokens=MAX_TOKENS, tool_choice="required")
    # The first turn must call the tool; the SDK then resets tool_choice, and the next turn's
    # request carries response_format (the output type's schema) beside the tools.
    agent = agents.Agent(name="weather", instructions="Answer with the weather.", model=model,
                         model_settings=settings, tools=[weather], output_type=Weather)
    try:
        result = agents.Runner.run_sync(agent, ASK, max_turns=4)
    except agents.MaxTurnsExceeded:
        result = None  # the model kept calling the tool: its choice, not a protocol failure
    assert called, "the tool was never called"
    if result is not None:
        assert isinstance(result.final_output, Weather)

    plain = agents.Agent(name="plain", instructions="Be brief.", model=model,
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=MAX_TOKENS))
    assert isinstance(agents.Runner.run_sync(plain, "Say hello.").final_output, str)


# ---------------------------------------------------------------------------------------- pydantic-ai


def _pydantic_ai_model(server):
    _pkg("pydantic_ai", "pydantic-ai-slim[openai]")
    from pydantic_ai.providers.openai import OpenAIProvider
    from openai import AsyncOpenAI

    try:
        from pydantic_ai.models.openai import OpenAIChatModel
    except ImportError:  # before 1.0
        from pydantic_ai.models.openai import OpenAIModel as OpenAIChatModel
    client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=TIMEOUT, max_retries=0)
    return OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))


def test_pydantic_ai_plain_tool_and_output_type(server):
    model = _pydantic_ai_model(server)
    from pydantic_ai import Agent, NativeOutput

    settings = {"temperature": 0, "max_tokens": MAX_TOKENS}
    plain = Agent(model, model_settings=settings)
    assert isinstance(plain.run_sync("Say hello.").output, str)

    # The default output mode: the output type is a tool the model must call (tool_choice required).
    agent = Agent(model, output_type=Weather, model_settings=settings, retries=2)
    called: list[str] = []

    @agent.tool_plain
    def weather(city: str) -> str:
        """The current weather in a city."""
        called.append(city)
        return get_weather(city)

    from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    # A bound on the rounds: a model that keeps calling the weather tool, or whose output fails
    # validation past the retries, made its choice; what must not happen is a protocol error.
    try:
        result = agent.run_sync(ASK, usage_limits=UsageLimits(request_limit=4))
    except (UsageLimitExceeded, UnexpectedModelBehavior) as e:
        assert "status_code" not in str(e), e
    else:
        assert isinstance(result.output, Weather)

    # The native mode: response_format json_schema.
    native = Agent(model, output_type=NativeOutput(Weather), model_settings=settings)
    assert isinstance(native.run_sync(ASK).output, Weather)


# ---------------------------------------------------------------------------------------- langchain-openai


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_openai_invoke_bind_tools_structured(server, method):
    _pkg("langchain_openai", "langchain-openai")
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=f"{server.url}/v1", api_key="unused", temperature=0,
                     max_tokens=MAX_TOKENS, timeout=TIMEOUT, max_retries=0)
    assert isinstance(llm.invoke("Say hello.").content, str)

    msg = llm.bind_tools([get_weather], tool_choice="get_weather").invoke(ASK)
    assert [c["name"] for c in msg.tool_calls] == ["get_weather"]
    assert isinstance(msg.tool_calls[0]["args"]["city"], str)

    # json_mode is left out: it sends no schema, so the object's keys are the model's choice.
    out = llm.with_structured_output(Weather, method=method).invoke(f"{ASK} Reply in JSON with keys sky and city.")
    assert isinstance(out, Weather)


# ---------------------------------------------------------------------------------------- langchain-anthropic


def test_langchain_anthropic_invoke_bind_tools_structured(server):
    _pkg("langchain_anthropic", "langchain-anthropic")
    from langchain_anthropic import ChatAnthropic

    llm = ChatAnthropic(model=MODEL, base_url=server.url, api_key="unused", temperature=0,
                        max_tokens=MAX_TOKENS, timeout=TIMEOUT, max_retries=0)
    assert llm.invoke("Say hello.").content

    msg = llm.bind_tools([get_weather], tool_choice="get_weather").invoke(ASK)
    assert [c["name"] for c in msg.tool_calls] == ["get_weather"]
    assert isinstance(msg.tool_calls[0]["args"]["city"], str)

    out = llm.with_structured_output(Weather).invoke(ASK)
    assert isinstance(out, Weather)


# ---------------------------------------------------------------------------------------- litellm


def test_litellm_ollama_and_openai_providers(server):
    litellm = _pkg("litellm", "litellm")

    ask = [{"role": "user", "content": "Say hello."}]
    common = {"temperature": 0, "max_tokens": MAX_TOKENS, "timeout": TIMEOUT, "num_retries": 0}
    for model, base in ((f"ollama/{MODEL}", server.url), (f"ollama_chat/{MODEL}", server.url),
                        (f"openai/{MODEL}", f"{server.url}/v1")):
        r = litellm.completion(model=model, api_base=base, api_key="unused", messages=ask, **common)
        assert isinstance(r.choices[0].message.content, str), model

    tool = {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"]}}}
    r = litellm.completion(model=f"openai/{MODEL}", api_base=f"{server.url}/v1", api_key="unused",
                           messages=[{"role": "user", "content": ASK}], tools=[tool],
                           tool_choice={"type": "function", "function": {"name": "get_weather"}}, **common)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"

    r = litellm.completion(model=f"openai/{MODEL}", api_base=f"{server.url}/v1", api_key="unused",
                           messages=[{"role": "user", "content": ASK}], response_format=Weather, **common)
    Weather.model_validate_json(r.choices[0].message.content)


# ---------------------------------------------------------------------------------------- instructor


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor_response_model(server, mode):
    instructor = _pkg("instructor", "instructor")
    from openai import OpenAI

    raw = OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=TIMEOUT, max_retries=0)
    # Mode.JSON is left out: it sends no schema, so the object's keys are the model's choice.
    client = instructor.from_openai(raw, mode=getattr(instructor.Mode, mode))
    out = client.chat.completions.create(model=MODEL, response_model=Weather, max_retries=1, temperature=0,
                                         max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": ASK}])
    assert isinstance(out, Weather)


# ---------------------------------------------------------------------------------------- langchain-ollama


def test_langchain_ollama_invoke_tools_structured(server):
    _pkg("langchain_ollama", "langchain-ollama")
    from langchain_ollama import ChatOllama

    llm = ChatOllama(model=MODEL, base_url=server.url, temperature=0, num_predict=MAX_TOKENS,
                     client_kwargs={"timeout": TIMEOUT})
    assert isinstance(llm.invoke("Say hello.").content, str)
    # Ollama's API has no tool_choice: whether the model calls the tool is its choice; the
    # protocol (tools offered, calls parsed back into the message) is what is checked
    msg = llm.bind_tools([get_weather]).invoke(ASK)
    assert all(c["name"] == "get_weather" and isinstance(c["args"], dict) for c in msg.tool_calls)
    # its default structured output: Ollama's format with the JSON schema, enforced by the grammar
    out = llm.with_structured_output(Weather).invoke(ASK)
    assert isinstance(out, Weather)


# ---------------------------------------------------------------------------------------- llama-index


def test_llama_index_ollama_complete_chat_tools_structured(server):
    _pkg("llama_index.llms.ollama", "llama-index-llms-ollama")
    from llama_index.core.llms import ChatMessage
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.ollama import Ollama

    # no context_window given: the integration asks /api/show for the model's context length
    llm = Ollama(model=MODEL, base_url=server.url, request_timeout=TIMEOUT, temperature=0,
                 additional_kwargs={"num_predict": MAX_TOKENS})
    assert llm.metadata.context_window > 0 and llm.metadata.is_function_calling_model
    assert isinstance(llm.complete("Say hello.").text, str)
    assert isinstance(llm.chat([ChatMessage(role="user", content="Say hello.")]).message.content, str)

    response = llm.chat_with_tools([FunctionTool.from_defaults(fn=get_weather)], user_msg=ASK)
    calls = llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
    assert all(c.tool_name == "get_weather" and isinstance(c.tool_kwargs, dict) for c in calls)

    out = llm.as_structured_llm(Weather).complete(ASK).raw
    assert isinstance(out, Weather)


# ---------------------------------------------------------------------------------------- smolagents


def test_smolagents_tool_calling_agent(server):
    smolagents = _pkg("smolagents", "smolagents[openai]")

    model = smolagents.OpenAIServerModel(model_id=MODEL, api_base=f"{server.url}/v1", api_key="unused",
                                         temperature=0, max_tokens=MAX_TOKENS,
                                         client_kwargs={"timeout": TIMEOUT, "max_retries": 0})
    reply = model.generate([{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}])
    assert isinstance(reply.content, str)

    @smolagents.tool
    def weather(city: str) -> str:
        """The current weather in a city.

        Args:
            city: the city's name
        """
        return get_weather(city)

    # ToolCallingAgent sends its tools (final_answer among them) with tool_choice "required"; a
    # server error would raise AgentGenerationError out of run(); a model's odd call is a step's
    # error the agent records and goes on from, and two steps bound the run.
    agent = smolagents.ToolCallingAgent(tools=[weather], model=model, max_steps=2, verbosity_level=0)
    agent.run(ASK)
    errors = [str(s.error) for s in agent.memory.steps if getattr(s, "error", None)]
    assert not any("Error code:" in e or "status" in e.lower() for e in errors), errors


# ---------------------------------------------------------------------------------------- dspy


def test_dspy_predict_with_both_adapters(server):
    dspy = _pkg("dspy", "dspy")
    import json

    from dspy.utils.exceptions import AdapterParseError

    class Sky(dspy.Signature):
        """Say what the sky is like in the city asked about."""

        question: str = dspy.InputField()
        sky: Literal["sunny", "rainy", "cloudy"] = dspy.OutputField()

    lm = dspy.LM(f"openai/{MODEL}", api_base=f"{server.url}/v1", api_key="unused", temperature=0,
                 max_tokens=MAX_TOKENS * 2, cache=False, num_retries=0, timeout=TIMEOUT)

    def predict(adapter) -> None:
        """A prediction, or dspy's own parse error over an answer the server gave as asked: DSPy
        asks an unknown model for ``json_object`` (no schema), so the object is the model's
        choice, but it must be a JSON object. A server error would be litellm's exception."""
        with dspy.context(lm=lm, adapter=adapter):
            try:
                assert dspy.Predict(Sky)(question=ASK).sky in ("sunny", "rainy", "cloudy")
            except AdapterParseError as e:
                assert isinstance(json.loads(e.lm_response), dict), e.lm_response

    predict(dspy.JSONAdapter())  # response_format json_object
    # ChatAdapter, dspy's default: plain text with [[ ## field ## ]] markers, parsed back; a
    # 135M model may miss the markers, and then dspy asks again through its JSON adapter
    predict(dspy.ChatAdapter())
    assert len(lm.history) >= 2 and all(h.get("response") is not None for h in lm.history)
