"""The first-run suggestion: the best catalog model for this computer, from the planner's verdicts.

The service plans every catalog entry against this machine's memory (``GET /hearth/catalog``
carries each entry's ``fit``: verdict, predicted tokens/s, memory). The suggestion is the largest
chat model that fits and still answers at a comfortable speed; where nothing is that fast, the
fastest one that fits. Nothing here speaks HTTP or builds widgets: it reads parsed entries.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.api_types import CatalogModel
from app.qt_models import format_size

#: below this predicted speed an answer feels slow to read as it is written
COMFORTABLE_TOKENS_PER_S = 10.0
_WHERE = {"gpu": "on the graphics card", "partial": "split between the graphics card and the processor",
          "cpu": "on the processor"}


@dataclass(slots=True, frozen=True)
class Suggestion:
    entry: CatalogModel
    reason: str  #: why this one, in a sentence

    @property
    def model_id(self) -> str:
        return self.entry.id

    @property
    def installed(self) -> bool:
        return self.entry.local or self.entry.embedded

    def detail(self) -> str:
        """Name-level facts: parameters, quantization, download size."""
        e = self.entry
        bits = [e.parameters and f"{e.parameters} parameters", e.default_quant,
                format_size(e.size) and f"{format_size(e.size)} download", e.license]
        return " · ".join(b for b in bits if b)


def _speed(e: CatalogModel) -> float | None:
    v = (e.fit or {}).get("predicted_tokens_per_s")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _size_key(e: CatalogModel) -> int:
    return e.params or (e.fit or {}).get("total_bytes") or e.size or 0


def suggest(entries: list[CatalogModel], min_tokens_per_s: float = COMFORTABLE_TOKENS_PER_S) -> Suggestion | None:
    """The model to suggest, or None when the planner says no chat model fits (or gave no verdicts)."""
    fitting = [e for e in entries if e.task is None and (e.fit or {}).get("fits") is True
               and (e.fit or {}).get("verdict") in _WHERE]
    if not fitting:
        return None
    comfortable = [e for e in fitting if (_speed(e) or 0) >= min_tokens_per_s]
    if comfortable:
        best = max(comfortable, key=lambda e: (_size_key(e), (e.fit or {}).get("verdict") == "gpu", _speed(e) or 0))
        why = "the largest model that fits this computer's memory and still answers at a comfortable speed"
    else:
        best = max(fitting, key=lambda e: (_speed(e) or 0, -_size_key(e)))
        why = "no model runs fast here; this one is the quickest that fits this computer's memory"
    where = _WHERE[(best.fit or {})["verdict"]]  # a fitting entry has its verdict
    speed = _speed(best)
    said = f"It runs {where}" + (f", about {speed:.0f} tokens per second" if speed else "") + "."
    return Suggestion(best, f"{why[0].upper()}{why[1:]}. {said}")


class FirstRun:
    """Offers the suggestion once (until it is used or dismissed): fills the card, starts the
    download through the model service, follows it in the card, and hands the model to the
    chat when it is here. ``card`` is a ``SuggestionCard``; ``models`` the ``ModelStoreService``."""

    def __init__(self, card, models, run, *, use, done) -> None:
        self.card, self.models, self.run = card, models, run
        self.use, self.done = use, done  # use(model_id); done(): remember it is settled
        self.suggestion: Suggestion | None = None
        self.download_id: str | None = None
        card.download_requested.connect(self.download)
        card.use_requested.connect(self._use)
        card.dismissed.connect(self.done)
        models.downloads.dataChanged.connect(self._progress)
        models.downloads.rowsInserted.connect(self._progress)
        models.downloads.modelReset.connect(self._progress)

    def offer(self, entries: list[CatalogModel]) -> Suggestion | None:
        """Show the card for the best model among ``entries`` (the whole catalog)."""
        if self.download_id is not None:
            return self.suggestion  # already under way
        self.suggestion = suggest(entries)
        if self.suggestion is None:
            self.card.hide()
            return None
        s = self.suggestion
        self.card.offer(s.entry.name, s.detail(), s.reason, s.installed)
        self.card.show()
        return s

    def download(self) -> None:
        if self.suggestion is None:
            return

        async def pull():
            self.download_id = await self.models.pull(self.suggestion.model_id)
            if self.download_id is None:
                self.card.show_failed("the service did not start it")
            else:
                self._progress()
        self.run(pull())

    def _progress(self, *_) -> None:
        if self.download_id is None:
            return
        row = self.models.downloads.row_of(self.download_id)
        if row is None:
            return
        d = self.models.downloads.item(row)
        state = d.get("state", "")
        if state == "completed":
            if self.card.state != "ready":
                self.card.show_ready()
        elif state in ("failed", "cancelled"):
            self.card.show_failed(d.get("error") or state)
        else:
            self.card.show_progress(state, d.get("done_bytes") or 0, d.get("total_bytes"), d.get("speed_bps"))

    def _use(self) -> None:
        if self.suggestion is not None:
            self.use(self.suggestion.model_id)
        self.card.hide()
        self.done()
