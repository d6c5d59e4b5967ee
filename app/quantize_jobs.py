"""Making a smaller version of a local model from the Models page: the service's quantize job.

``start`` asks the service (``POST /hearth/quantize``) with the data directory's confirmation
token: the user's click is the confirmation it needs. While a job runs its state is read once a
second and ``changed`` carries it (None once nothing runs); a finished job refreshes the local
models, where the new file appears.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

from PySide6.QtCore import QObject, Signal

from app import background
from app.api_client import ApiClient
from app.errors import ApiProblem, UserError

#: what the Models page offers: llama.cpp's mixes, with what each is for
TARGETS = (
    ("Q4_K_M", "about 4.9 bits a weight: the usual choice, a third of Q8_0's size"),
    ("Q5_K_M", "about 5.7 bits a weight: a little larger, a little closer to the original"),
    ("Q6_K", "about 6.6 bits a weight: near the original"),
    ("Q8_0", "8.5 bits a weight: practically the original"),
    ("Q3_K_M", "about 3.9 bits a weight: smaller still, noticeably less accurate"),
)
#: types that are the original weights (or as good as them): nothing is lost twice
UNQUANTIZED = ("F32", "F16", "BF16")
POLL_S = 1.0


def source_bits(quant: str | None) -> float | None:
    """Bits per weight of a local file from its type (``LocalModel.quant``: Q4_1, UD-Q4_K_XL,
    F16); None where the type is unknown. A type outside llama.cpp's table is taken at its
    digit and a half (Q4_K_XL: 4.5), which orders it among the stock mixes."""
    from runtime.store.gguf_names import BITS_PER_WEIGHT

    if not quant:
        return None
    name = quant.upper().removeprefix("UD-")
    if name in BITS_PER_WEIGHT:
        return BITS_PER_WEIGHT[name]
    m = re.match(r"I?Q(\d)", name)
    return int(m.group(1)) + 0.5 if m else None


def targets_for(quant: str | None) -> list[tuple[str, str]]:
    """The targets that make this file smaller: each one's bits per weight below the source's
    (all of them where the source's type is unknown)."""
    from runtime.store.gguf_names import BITS_PER_WEIGHT

    bits = source_bits(quant)
    return [(mix, what) for mix, what in TARGETS if bits is None or BITS_PER_WEIGHT[mix] < bits]


def requantize_note(quant: str | None) -> str:
    """What making a smaller version costs this file, in words ("" for the original weights)."""
    if quant and quant.upper() in UNQUANTIZED:
        return ""
    if not quant:
        return ("Hearth cannot tell this file's precision: if it is already quantized, quantizing it again "
                "loses more quality than quantizing the original weights would.")
    return (f"This file is already quantized ({quant}): quantizing it again loses more quality than a fresh "
            "quantization from the original weights would. Where you can, download the size you want instead.")


def describe(job: dict) -> str:
    """One line for a job: what is being made and how far it is."""
    what = f"Making a {job.get('to')} version of {job.get('model')}"
    state = job.get("state")
    if state == "done":
        size = (job.get("result") or {}).get("size")
        return f"{what}: done" + (f" ({size / 1e6:.0f} MB)" if size else "")
    if state == "failed":
        return f"{what} failed: {job.get('error') or 'the quantizer stopped'}"
    if state == "stopped":
        return f"{what}: stopped"
    step, done, total = job.get("step") or "starting", job.get("done") or 0, job.get("total") or 0
    return f"{what}: {step}" + (f" {done}/{total}" if total else "") + "…"


class QuantizeService(QObject):
    changed = Signal(object)  # the current or last job (a dict), None before the first
    error = Signal(object)  # UserError

    def __init__(self, client: ApiClient, data_dir: Path | None, refresh_local: Callable[[], Awaitable]) -> None:
        super().__init__()
        self.client, self.data_dir, self.refresh_local = client, data_dir, refresh_local
        self.job: dict | None = None
        self._follow: asyncio.Task | None = None

    def _confirmation(self) -> dict[str, str] | None:
        """The data directory's confirmation token: starting and stopping a job are the user's acts."""
        from runtime.import_confirm import CONFIRM_HEADER, load_token

        token = load_token(self.data_dir) if self.data_dir is not None else None
        return {CONFIRM_HEADER: token} if token else None

    async def start(self, model_id: str, to: str) -> bool:
        try:
            self.job = await self.client.post("/hearth/quantize", {"model": model_id, "to": to}, timeout=60,
                                              headers=self._confirmation())
        except ApiProblem as e:
            self.error.emit(UserError("A smaller version could not be started.", e.message,
                                      "Wait for the one being made, or stop it." if e.status == 409 else
                                      "Try again; if it keeps failing, run `hearth quantize` in a terminal."))
            return False
        self.changed.emit(self.job)
        if self._follow is None or self._follow.done():
            self._follow = background.start(self._poll(), "following the smaller version")
        return True

    async def stop(self) -> None:
        if self.job is not None and self.job.get("state") == "running":
            try:
                self.job = await self.client.delete(f"/hearth/quantize/{quote(self.job['id'], safe='')}",
                                                    headers=self._confirmation())
            except ApiProblem:
                return
            self.changed.emit(self.job)

    async def _poll(self) -> None:
        while self.job is not None and self.job.get("state") == "running":
            await asyncio.sleep(POLL_S)
            try:
                jobs = (await self.client.get("/hearth/quantize")).get("jobs") or []
            except ApiProblem:
                continue
            found = next((j for j in jobs if j.get("id") == self.job.get("id")), None)
            if found is None:  # the service restarted: the job went with it
                self.job = {**self.job, "state": "failed", "error": "the service restarted"}
            else:
                self.job = found
            self.changed.emit(self.job)
        if self.job is not None and self.job.get("state") == "done":
            try:
                await self.refresh_local()
            except ApiProblem:
                pass  # the service went as the job ended: the list is read again when it is back

    def close(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
