"""A model's settings over the service's API: its chat template (read it, replace it with a
file's text, or go back to the model's own: ``/hearth/models/{id}/template``) and its load
settings (context, GPU layers, KV cache type: ``/hearth/models/{id}/settings``).

Changing either is the user's act: the request carries the data directory's confirmation token
(the user acted in the window). The service checks a template renders a conversation before
keeping it, and reloads the model with a change once the model is idle.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from app.api_client import ApiClient
from app.api_types import ModelLoadSettings, ModelTemplate


class ModelSettings:
    """Raises ``ApiProblem`` with the service's message (a template that does not render, a value
    out of range, says why)."""

    def __init__(self, client: ApiClient, data_dir: Path | None) -> None:
        self.client, self.data_dir = client, data_dir

    @staticmethod
    def _path(model_id: str, what: str = "template") -> str:
        return f"/hearth/models/{quote(model_id, safe='')}/{what}"

    def _confirmation(self) -> dict[str, str] | None:
        from runtime.import_confirm import CONFIRM_HEADER, load_token

        token = load_token(self.data_dir) if self.data_dir is not None else None
        return {CONFIRM_HEADER: token} if token else None

    async def get(self, model_id: str) -> ModelTemplate:
        return ModelTemplate.from_api(await self.client.get(self._path(model_id)))

    async def replace(self, model_id: str, text: str) -> ModelTemplate:
        body = await self.client.put(self._path(model_id), {"template": text}, headers=self._confirmation())
        return ModelTemplate.from_api(body)

    async def reset(self, model_id: str) -> ModelTemplate:
        return ModelTemplate.from_api(await self.client.delete(self._path(model_id), headers=self._confirmation()))

    async def load_settings(self, model_id: str) -> ModelLoadSettings:
        return ModelLoadSettings.from_api(await self.client.get(self._path(model_id, "settings")))

    async def store_load_settings(self, model_id: str, ctx: int | None, gpu_layers: int | None,
                                  kv_type: str | None) -> ModelLoadSettings:
        body = {"ctx": ctx, "gpu_layers": gpu_layers, "kv_type": kv_type}
        return ModelLoadSettings.from_api(await self.client.put(self._path(model_id, "settings"), body,
                                                                headers=self._confirmation()))

    async def reset_load_settings(self, model_id: str) -> ModelLoadSettings:
        return ModelLoadSettings.from_api(await self.client.delete(self._path(model_id, "settings"),
                                                                   headers=self._confirmation()))
