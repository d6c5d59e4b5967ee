"""The texts Hearth measures with: a calibration text (importance, sensitivity) and a held-out
text (quality), shipped with Hearth; the user may give their own calibration file."""

from __future__ import annotations

import hashlib
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
CALIBRATION = DATA / "calibration.txt"
HELDOUT = DATA / "heldout.txt"


def read_text(path: Path) -> str:
    text = Path(path).read_text(encoding="utf-8")
    if len(text.split()) < 50:
        raise ValueError(f"{path} holds too little text to calibrate on (50 words at least)")
    return text


def signature(text: str, chunk: int) -> str:
    """Names the calibration data in an importance file, so a changed text is measured again."""
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}:chunk{chunk}"
