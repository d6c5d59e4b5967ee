"""What a chat that outgrows the model's context sends: whole turns left out, by a policy.

A chat longer than the context fails with ``context_length_exceeded`` unless its request names a
policy (as LM Studio's chats do):

- ``truncate_middle``: the system prompt and the first turn stay (what the chat is about), and
  the turns after the first are left out, oldest first, until the rest fits;
- ``rolling_window``: the system prompt stays, and the oldest turns are left out until the rest
  fits.

A turn is a user message and everything up to the next one (the answer, its tool calls and their
results), so a call is never sent without its result or a result without its call, and what
remains still starts with a user message, as templates that check alternation require. The
last turn is never left out: where it alone does not fit, the request fails as before.

"Fits" means the prompt leaves room for the reply: the request's ``max_tokens``, at most half
the context, or ``REPLY_ROOM``. The fewest turns are left out (a binary search over renders of
the template, each tokenized: the count is the model's own, chat template included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

TRUNCATE_MIDDLE = "truncate_middle"
ROLLING_WINDOW = "rolling_window"
POLICIES = (TRUNCATE_MIDDLE, ROLLING_WINDOW)
#: tokens kept for the reply when the request does not say how many it wants
REPLY_ROOM = 1024


@dataclass(frozen=True, slots=True)
class Fitted:
    tokens: list[int]
    #: messages left out of the conversation
    dropped: int


def reply_room(max_tokens: int | None, limit: int) -> int:
    """The room a fitted prompt leaves for the reply."""
    return min(max_tokens if max_tokens else REPLY_ROOM, limit // 2)


def _turns(messages: list[dict]) -> tuple[int, list[int]]:
    """(messages before the first turn: the system prompt, where each turn starts)."""
    head = 0
    while head < len(messages) and messages[head].get("role") in ("system", "developer"):
        head += 1
    starts = [i for i in range(head, len(messages)) if messages[i].get("role") == "user"]
    if not starts or starts[0] != head:
        starts = [head] + starts  # messages before the first user message are a turn of their own
    return head, starts


def without_turns(messages: list[dict], policy: str, n: int) -> tuple[list[dict], int]:
    """``messages`` with ``n`` turns left out by ``policy``, and how many messages that is."""
    head, starts = _turns(messages)
    first = 1 if policy == TRUNCATE_MIDDLE else 0  # the turns the policy keeps at the start
    droppable = max(0, len(starts) - 1 - first)
    n = min(n, droppable)
    if n == 0:
        return messages, 0
    cut_from, cut_to = starts[first], starts[first + n]
    return messages[:cut_from] + messages[cut_to:], cut_to - cut_from


def droppable_turns(messages: list[dict], policy: str) -> int:
    _, starts = _turns(messages)
    return max(0, len(starts) - 1 - (1 if policy == TRUNCATE_MIDDLE else 0))


def fit(messages: list[dict], policy: str, tokenize: Callable[[list[dict]], list[int]], budget: int) -> Fitted:
    """The tokens of ``messages`` with the fewest turns left out that make at most ``budget``
    tokens (the context less the reply's room). Where even the last turn alone is over it, the
    tokens with every droppable turn left out (the caller's length check then refuses them)."""
    tokens = tokenize(messages)
    if len(tokens) <= budget or policy not in POLICIES:
        return Fitted(tokens, 0)
    lo, hi = 1, droppable_turns(messages, policy)
    if hi == 0:
        return Fitted(tokens, 0)
    best: Fitted | None = None
    while lo <= hi:  # the fewest turns whose leaving out makes it fit
        mid = (lo + hi) // 2
        kept, dropped = without_turns(messages, policy, mid)
        t = tokenize(kept)
        if len(t) <= budget:
            best, hi = Fitted(t, dropped), mid - 1
        else:
            lo = mid + 1
    if best is not None:
        return best
    kept, dropped = without_turns(messages, policy, droppable_turns(messages, policy))
    return Fitted(tokenize(kept), dropped)
