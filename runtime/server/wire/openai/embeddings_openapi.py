"""The OpenAPI description of the embedding and rerank endpoints (merged into ``openapi.py``)."""

from __future__ import annotations

from runtime.server.generate.embed_run import MAX_INPUTS

STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
_TEXT = {**STR, "minLength": 1}
_IDS = {"type": "array", "minItems": 1, "items": {**INT, "minimum": 0}}
_TRUNCATE = {**BOOL, "description": "false: an input longer than the model's maximum is a 400 instead of being cut"}


def schemas() -> dict:
    texts = {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS, "items": _TEXT}
    usage = {"type": "object", "properties": {"prompt_tokens": INT, "total_tokens": INT}}
    docs = {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS, "items": {"oneOf": [
        STR, {"type": "object", "required": ["text"], "properties": {"text": STR}}]}}
    return {
        "EmbeddingRequest": {"type": "object", "required": ["input"], "properties": {
            "model": {**_TEXT, "description": "an embedding model (default minilm-l6)"},
            "input": {"oneOf": [_TEXT, texts, _IDS, {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS,
                                                    "items": _IDS}]},
            "encoding_format": {"enum": ["float", "base64"]},
            "dimensions": {**INT, "minimum": 1, "description": "only for models trained for Matryoshka truncation"},
            "user": STR, "truncate": _TRUNCATE},
            "examples": [{"model": "minilm-l6", "input": ["The cat sat", "A feline rested"]}]},
        "EmbeddingList": {"type": "object", "required": ["object", "data", "model", "usage"], "properties": {
            "object": {"const": "list"}, "model": STR, "usage": usage,
            "data": {"type": "array", "items": {"type": "object", "required": ["object", "index", "embedding"],
                                                "properties": {"object": {"const": "embedding"}, "index": INT,
                                                               "embedding": {"oneOf": [{"type": "array", "items": NUM},
                                                                                       STR]}}}}}},
        "OllamaEmbedRequest": {"type": "object", "required": ["model", "input"], "properties": {
            "model": _TEXT, "input": {"oneOf": [_TEXT, texts]}, "truncate": _TRUNCATE,
            "dimensions": {**INT, "minimum": 1}, "keep_alive": {"oneOf": [NUM, STR]}, "options": {"type": "object"}},
            "examples": [{"model": "minilm-l6", "input": "Hello"}]},
        "OllamaEmbedResponse": {"type": "object", "required": ["model", "embeddings"], "properties": {
            "model": STR, "embeddings": {"type": "array", "items": {"type": "array", "items": NUM}},
            "total_duration": INT, "load_duration": INT, "prompt_eval_count": INT}},
        "OllamaEmbeddingsRequest": {"type": "object", "required": ["model", "prompt"], "properties": {
            "model": _TEXT, "prompt": _TEXT, "keep_alive": {"oneOf": [NUM, STR]}, "options": {"type": "object"}},
            "examples": [{"model": "minilm-l6", "prompt": "Hello"}]},
        "OllamaEmbeddingsResponse": {"type": "object", "required": ["embedding"], "properties": {
            "embedding": {"type": "array", "items": NUM}}},
        "RerankRequest": {"type": "object", "required": ["query", "documents"], "properties": {
            "model": {**_TEXT, "description": "a reranker (cross-encoder); default: a loaded one"},
            "query": _TEXT, "documents": docs, "top_n": {**INT, "minimum": 1, "maximum": MAX_INPUTS},
            "return_documents": BOOL, "truncate": _TRUNCATE},
            "examples": [{"model": "bge-reranker-base", "query": "capital of France",
                          "documents": ["Paris is the capital of France.", "Berlin is in Germany."], "top_n": 1}]},
        "RerankResponse": {"type": "object", "required": ["results"], "properties": {
            "id": STR, "model": STR, "usage": usage, "results": {"type": "array", "items": {
                "type": "object", "required": ["index", "relevance_score"], "properties": {
                    "index": INT, "relevance_score": NUM, "document": {"type": "object", "properties": {"text": STR}}}}}}},
        "TeiRerankRequest": {"type": "object", "required": ["query", "texts"], "properties": {
            "model": _TEXT, "query": _TEXT, "texts": texts, "raw_scores": BOOL, "return_text": BOOL,
            "truncate": _TRUNCATE}},
        "TeiRerankResponse": {"type": "array", "items": {"type": "object", "required": ["index", "score"],
                                                         "properties": {"index": INT, "score": NUM, "text": STR}}},
    }


def operations(op, ref) -> dict:
    """``op`` and ``ref`` are ``openapi._op`` and ``openapi._ref``."""
    return {
        ("POST", "/v1/embeddings"): op("Embeddings (OpenAI format): float or base64, Matryoshka dimensions",
                                       ref("EmbeddingList"), body="EmbeddingRequest", tag="openai"),
        ("POST", "/api/embed"): op("Embeddings (Ollama format)", ref("OllamaEmbedResponse"),
                                   body="OllamaEmbedRequest", ollama=True, tag="ollama"),
        ("POST", "/api/embeddings"): op("One embedding (Ollama's older format)", ref("OllamaEmbeddingsResponse"),
                                        body="OllamaEmbeddingsRequest", ollama=True, tag="ollama"),
        ("POST", "/v1/rerank"): op("Rerank documents against a query with a cross-encoder (Cohere / Jina format)",
                                   ref("RerankResponse"), body="RerankRequest", tag="rerank"),
        ("POST", "/rerank"): op("Rerank texts against a query (Text Embeddings Inference format)",
                                ref("TeiRerankResponse"), body="TeiRerankRequest", tag="rerank"),
    }
