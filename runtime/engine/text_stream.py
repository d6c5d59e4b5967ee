"""Token bytes to text, incrementally, with stop strings that never leak.

A token may end inside a UTF-8 character, and the end of the text so far may be the start
of a stop string; both are held back until the next token decides them.
"""

from __future__ import annotations

import codecs


class TextStream:
    def __init__(self, stop: list[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._held = ""
        #: the stop string that ended the text, once one has
        self.matched: str | None = None

    def push(self, data: bytes) -> tuple[str, bool]:
        """Add a token's bytes. Returns (text that is safe to emit, whether a stop string hit).

        On a hit the text up to (not including) the stop string is returned.
        """
        text = self._held + self._decoder.decode(data)
        if not self._stop:
            self._held = ""
            return text, False
        hit = min(((i, s) for s in self._stop if (i := text.find(s)) >= 0), default=None)
        if hit is not None:
            self._held = ""
            self.matched = hit[1]
            return text[: hit[0]], True
        keep = max((self._partial(text, s) for s in self._stop), default=0)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], False

    @staticmethod
    def _partial(text: str, stop: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of ``stop``."""
        for k in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:k]):
                return k
        return 0

    def flush(self) -> str:
        """The held text when generation ends without a stop string."""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return text
