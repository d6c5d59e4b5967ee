"""Which model files a request may name: the API must not become a way to open any file.

The decision is ``runtime.store.resolve.resolve_model`` with the service's ``Confinement``
(built here from its settings): a request's reference is accepted only when the real path of
the file it leads to lies inside the data directory, a ``--models-dir`` folder or the Hugging
Face cache, or is a registered imported file. The operator's own ``--model`` and ``--draft``
are trusted as given.
"""

from __future__ import annotations

from runtime.config import ServeConfig
from runtime.store.resolve import Confinement, ModelPathRefused, ResolvedModel, resolve_model


def confinement(config: ServeConfig) -> Confinement:
    return Confinement.of(config.data_dir, config.security.models_dirs, (config.model, config.engine.draft))


def resolve_request_model(ref: str, config: ServeConfig) -> ResolvedModel:
    """``ref`` from a request to its checked file; raises ``ModelPathRefused``,
    ``UnknownModel`` or ``InvalidModelFile``. Blocking: call it from a thread."""
    return resolve_model(ref, config.data_dir, confinement(config))


__all__ = ["ModelPathRefused", "confinement", "resolve_request_model"]
