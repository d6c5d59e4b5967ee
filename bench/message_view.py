"""The chat's message view with a long conversation: time to first paint when it opens, and the
longest the event loop is blocked while scrolling through it, switching theme and streaming an
answer at its end. Real widgets (offscreen by default), the app's own style; prints JSON.

    python bench/message_view.py [--messages 1000] [--width 1180]

Scrolling is a fast flick of the wheel from the bottom to the top (144 px a frame), then 30
jumps of the scroll bar to random places (a drag). A block is measured with a timer that fires every millisecond: the longest gap between two of its
ticks, less the millisecond, is the longest the loop was busy with one piece of work (a scroll
step and the paint it caused). On a machine shared with other work, a block also contains time
spent waiting for a core: ``worst_block_cpu_ms`` is the CPU time this process used in the
longest block, the work itself. ``load`` is the machine's load average when the run ended.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

CODE = '''```python
def fibonacci(n: int) -> list[int]:
    """The first n Fibonacci numbers."""
    out = [0, 1]
    while len(out) < n:
        out.append(out[-1] + out[-2])
    return out[:n]

print(fibonacci(20))  # a comment that runs on and on to make this line longer than the column is wide
```'''

PARAGRAPHS = [
    "A decorator is a function that takes a function and returns a new one, usually to add behaviour "
    "around it, like timing, caching or checking arguments.",
    "Here are a few things to try:\n\n1. **Museums** in the morning, when they are quiet.\n2. A long lunch "
    "somewhere warm.\n3. A film in the evening.",
    "The short answer is yes. The longer one depends on how much memory the model needs, which is about "
    "the size of its file plus the KV cache for the context you choose.",
    "| Model | Size | Speed |\n|---|---|---|\n| SmolLM2 135M | 95 MB | 140 tok/s |\n| Gemma 3 270M | 240 MB | 76 tok/s |",
    "`pip install hearth` then `hearth serve` and point any OpenAI client at port 4327.",
]


def conversation(n: int, seed: int = 5):
    """``n`` messages, user and assistant in turn, answers of mixed length with code and tables."""
    from app.conversations import Message

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        if i % 2 == 0:
            text = rnd.choice(["What is a decorator?", "Ideas for a rainy weekend?", "Will it fit on my laptop?",
                               "Show me a Fibonacci function in Python, please, with type hints.",
                               "How do I start the API?"])
            out.append(Message(i + 1, "user", text))
        else:
            parts = rnd.sample(PARAGRAPHS, rnd.randint(1, 3))
            if rnd.random() < 0.3:
                parts.insert(1, CODE)
            meta = {"model": "smollm2-135m", "finish": "stop", "tokens_per_s": 71.2, "completion_tokens": 96,
                    "ttft_s": 0.21}
            out.append(Message(i + 1, "assistant", "\n\n".join(parts), meta))
    return out


class Ticker:
    """Records the gaps between ticks of a 1 ms timer: the loop's blocks."""

    def __init__(self) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.gaps: list[float] = []
        self.cpu: list[float] = []  # the CPU time this process spent in each gap
        self._last = time.perf_counter()
        self._last_cpu = time.process_time()
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(1)
        self.timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.gaps.append((now - self._last) * 1000 - 1)
        self.cpu.append((cpu - self._last_cpu) * 1000)
        self._last, self._last_cpu = now, cpu

    def start(self) -> None:
        self.gaps.clear()
        self.cpu.clear()
        self._last, self._last_cpu = time.perf_counter(), time.process_time()
        self.timer.start()

    def stop(self) -> dict:
        self.timer.stop()
        gaps = sorted(self.gaps) or [0.0]
        return {"worst_block_ms": round(max(gaps[-1], 0.0), 1),
                "worst_block_cpu_ms": round(max(self.cpu or [0.0]), 1),
                "p99_block_ms": round(max(gaps[int(len(gaps) * 0.99) - 1 if len(gaps) > 1 else 0], 0.0), 1),
                "ticks": len(self.gaps)}


def run_for(app, seconds: float, step=None, every_ms: int = 16) -> None:
    """Run the loop for ``seconds``, calling ``step()`` every ``every_ms`` until it returns False."""
    from PySide6.QtCore import QTimer

    timer = None
    if step is not None:
        timer = QTimer()
        timer.setInterval(every_ms)
        timer.timeout.connect(lambda: step() or timer.stop())
        timer.start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end and (timer is None or timer.isActive()):
        app.processEvents()
        time.sleep(0.0002)
    if timer is not None:
        timer.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--width", type=int, default=1180, help="the window's width (the view gets what the chat page leaves)")
    p.add_argument("--height", type=int, default=760)
    p.add_argument("--give-up", type=float, default=300.0, help="seconds to wait for the first paint")
    args = p.parse_args()

    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication

    from app.qt_models import MessageListModel
    from app.ui import message_view
    from app.ui.style import palette, stylesheet, theme_for

    app = QApplication.instance() or QApplication([])
    app.setStyle("Fusion")
    light, dark = theme_for(False), theme_for(True)
    app.setPalette(palette(light))
    model = MessageListModel()
    view = message_view.MessageView(model)
    view.setStyleSheet(stylesheet(light))  # the view is one part the app styles (app/ui/theme_apply.py)
    # the chat page's share of the window: the rail (188 px) and the chat list (250 px) take the rest
    view.resize(args.width - 188 - 250, args.height - 160)
    view.show()
    run_for(app, 0.3)
    messages = conversation(args.messages)

    class FirstPaint(QObject):
        """The first paint of a message after the chat opens (any widget inside the view)."""

        at: float | None = None

        def eventFilter(self, obj, event):  # noqa: N802 - Qt's name
            if (self.at is None and event.type() == QEvent.Type.Paint
                    and isinstance(obj, message_view.MessageWidget)):
                self.at = time.perf_counter()
            return False

    spy = FirstPaint()
    app.installEventFilter(spy)
    t0 = time.perf_counter()
    model.reset(messages)  # what opening a chat does
    while spy.at is None and time.perf_counter() - t0 < args.give_up:
        app.processEvents()
    app.removeEventFilter(spy)
    if spy.at is None:
        print(json.dumps({"messages": args.messages, "first_paint_ms": None,
                          "note": f"no message painted within {args.give_up:.0f} s"}))
        return 1
    first_paint_ms = (spy.at - t0) * 1000
    run_for(app, 0.5)

    def built() -> int:
        return len([w for w in view.findChildren(message_view.MessageWidget) if w.parent() is not None])

    ticker = Ticker()
    bar = view.verticalScrollBar()
    ticker.start()
    bar.setValue(bar.maximum())

    def wheel_up():  # a fast flick of the wheel: three lines (144 px) every frame, bottom to top
        bar.setValue(bar.value() - 144)
        return bar.value() > bar.minimum()

    t_scroll = time.perf_counter()
    run_for(app, 300, wheel_up)
    wheel = ticker.stop()
    wheel["seconds"] = round(time.perf_counter() - t_scroll, 1)
    ticker.start()
    t_scroll = time.perf_counter()
    rnd = random.Random(1)
    jumps = iter(range(30))

    def jump():
        if next(jumps, None) is None:
            return False
        bar.setValue(rnd.randint(bar.minimum(), bar.maximum()))
        return True

    run_for(app, 60, jump, every_ms=100)
    jumps_result = ticker.stop()
    jumps_result["seconds"] = round(time.perf_counter() - t_scroll, 1)
    widgets_after_scroll = built()

    ticker.start()
    t = time.perf_counter()
    if hasattr(view, "release_hidden"):  # what the app does before it changes the style sheet
        view.release_hidden(everything=True)
    app.setPalette(palette(dark))
    view.setStyleSheet(stylesheet(dark))
    view.retheme(dark)
    run_for(app, 0.5)
    theme = ticker.stop()
    theme["switch_ms"] = round((time.perf_counter() - t) * 1000 - 500, 1)

    # an answer streaming at the end: 50 ms flushes of a few words, the view following the bottom
    from app.conversations import Message

    bar.setValue(bar.maximum())
    run_for(app, 0.3)
    live = Message(len(messages) + 1, "assistant", "", {"finish": "streaming"})
    model.append(live)
    words = (" ".join(PARAGRAPHS) + "\n\n" + CODE + "\n\n" + " ".join(PARAGRAPHS)).split(" ")
    pos = iter(range(0, len(words), 4))
    ticker.start()

    def flush():
        i = next(pos, None)
        if i is None:
            return False
        live.content = " ".join(words[:i + 4])
        model.changed(live.id)
        return True

    run_for(app, 60, flush, every_ms=50)
    stream = ticker.stop()
    stream["follows_bottom"] = bar.value() >= bar.maximum() - 2

    print(json.dumps({
        "messages": args.messages, "view_size": [view.width(), view.height()],
        "first_paint_ms": round(first_paint_ms, 1),
        "scroll_wheel": wheel, "scroll_jumps": jumps_result, "theme_switch": theme, "streaming": stream,
        "message_widgets_alive": widgets_after_scroll,
        "targets": {"first_paint_ms": 300, "worst_block_ms": 50},
        "load": os.getloadavg()[0], "cpus": os.cpu_count(),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
