"""Remote engines: models served by another OpenAI-compatible server, behind the same engine
interface as local ones (upstreams, their health, their keys in the OS keyring)."""
