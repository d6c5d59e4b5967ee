"""Hearth's headless runtime: engine, kernels, backends, API server, model store, hardware."""

__version__ = "0.1.0"
