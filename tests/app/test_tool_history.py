"""A chat's later questions send the earlier answers' tool calls and results back to the model."""

from app.conversations import Message
from app.tool_loop import ToolCall, history_messages


def test_an_answer_that_called_tools_goes_back_with_its_calls_and_results():
    done = ToolCall("call_1", "get_weather", '{"city": "Lisbon"}', "weather", "done", "Light rain, 14 °C", 0.01)
    denied = ToolCall("call_2", "delete_files", "{}", "files", "denied", "The user did not allow this call.")
    raw_piece = {"index": 0, "id": "call_3", "function": {"name": "get_weather", "arguments": '{"ci'}}
    turns = [
        Message(1, "user", "Weather in Lisbon?"),
        Message(2, "assistant", "Light rain, 14 °C.", {"tool_calls": [done.to_meta(), denied.to_meta()]}),
        Message(3, "user", "And tomorrow?"),
        Message(4, "assistant", "", {"tool_calls": [raw_piece], "finish": "stopped"}),  # cut off mid-call
        Message(5, "user", "Thanks"),
    ]
    msgs = history_messages(turns)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "assistant", "user", "user"]
    ask = msgs[1]
    assert ask["content"] is None
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in ask["tool_calls"]] == [
        ("call_1", "get_weather", '{"city": "Lisbon"}'), ("call_2", "delete_files", "{}")]
    assert msgs[2] == {"role": "tool", "tool_call_id": "call_1", "content": "Light rain, 14 °C"}
    assert msgs[3]["tool_call_id"] == "call_2" and "did not allow" in msgs[3]["content"]
    assert msgs[4] == {"role": "assistant", "content": "Light rain, 14 °C."}


def test_a_chat_without_tools_is_sent_as_before():
    turns = [Message(1, "user", "Hi"), Message(2, "assistant", "Hello!", {"model": "m"}), Message(3, "user", "")]
    assert history_messages(turns) == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                                       {"role": "user", "content": ""}]
