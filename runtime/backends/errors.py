"""Typed errors of the llama.cpp boundary (llama_decode return codes and loading)."""


class BackendError(Exception):
    """Base of every error the backend raises."""


class ModelLoadError(BackendError):
    """The model file or its context could not be created."""


class NoKVSlotError(BackendError):
    """llama_decode returned 1: the KV cache has no room for the batch."""


class DecodeAbortedError(BackendError):
    """llama_decode returned 2: aborted by the abort callback."""


class InvalidBatchError(BackendError):
    """llama_decode returned -1: the batch was malformed (a bug in the caller)."""


class DecodeFatalError(BackendError):
    """llama_decode returned < -1: the context is in an unknown state."""
