"""Typed application state (``web.AppKey``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from runtime.config import ServeConfig

if TYPE_CHECKING:  # the key's type only: the keys sit below the modules that own the values
    from runtime.server.models.model_manager import ModelManager

CONFIG = web.AppKey("config", ServeConfig)
MANAGER: web.AppKey[ModelManager] = web.AppKey("manager")
