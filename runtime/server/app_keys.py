"""Typed application state (``web.AppKey``)."""

from __future__ import annotations

from aiohttp import web

from runtime.config import ServeConfig
from runtime.server.model_manager import ModelManager

CONFIG = web.AppKey("config", ServeConfig)
MANAGER = web.AppKey("manager", ModelManager)
