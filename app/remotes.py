"""Remote engines as the app sees them: the service's upstreams and the models they offer
(``/hearth/remotes``), adding and removing one over HTTP, and the words that say where a
remote model's prompts go."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.api_client import ApiClient
from app.errors import ApiProblem


def privacy_line(model: dict) -> str:
    """What the Models page says under a remote model."""
    host = model.get("host") or (model.get("remote") or {}).get("host") or "another computer"
    return f"prompts leave this computer, to {host}"


def health_words(upstreams: list[dict]) -> str:
    """One line for the Server page: each upstream and its state ("" with none)."""
    return " · ".join(f"{u['name']} ({u.get('host', '')}): {(u.get('health') or {}).get('state', u.get('state', '?'))}"
                      for u in upstreams)


class RemotesService(QObject):
    changed = Signal(dict)  #: the last /hearth/remotes body: {"upstreams": [...], "models": [...]}
    problem = Signal(str)  #: why the last add or remove failed ("" after a success)

    def __init__(self, client: ApiClient, data_dir: Path | None = None) -> None:
        super().__init__()
        self.client = client
        self.data_dir = data_dir  #: where the service keeps the token that confirms the user's own acts
        self.state: dict = {"upstreams": [], "models": []}

    def _confirmed(self) -> dict[str, str] | None:
        """Adding or removing an upstream is the user's act, done in this window: the service asks
        for the data directory's confirmation token (``runtime.import_confirm``)."""
        from runtime.import_confirm import CONFIRM_HEADER, load_token

        token = load_token(self.data_dir) if self.data_dir is not None else None
        return {CONFIRM_HEADER: token} if token else None

    async def refresh(self) -> dict:
        try:
            self.state = await self.client.get("/hearth/remotes")
        except ApiProblem:
            return self.state  # an older service, or none running: nothing remote to show
        self.changed.emit(self.state)
        return self.state

    async def add(self, name: str, url: str, api_key: str = "", allow_insecure: bool = False) -> bool:
        body: dict = {"name": name.strip(), "url": url.strip(), "allow_insecure": allow_insecure}
        if api_key:
            body["api_key"] = api_key
        try:
            answer = await self.client.post("/hearth/remotes", body, timeout=60.0, headers=self._confirmed())
        except ApiProblem as e:
            self.problem.emit(str(e))
            return False
        self.problem.emit(f"Added, but its models could not be read: {answer['error']}" if answer.get("error") else "")
        await self.refresh()
        return True

    async def remove(self, name: str) -> bool:
        try:
            await self.client.delete(f"/hearth/remotes/{name}", headers=self._confirmed())
        except ApiProblem as e:
            self.problem.emit(str(e))
            return False
        self.problem.emit("")
        await self.refresh()
        return True
