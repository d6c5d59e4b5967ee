"""The recording proxy the agent tests and benchmarks put between a client and the service; it
lives in ``runtime/launch/proxy.py``, where ``hearth launch --check`` uses it too."""

from runtime.launch.proxy import Exchange, RecordingProxy

__all__ = ["Exchange", "RecordingProxy"]
