"""OpenAI's chat and text completions, embeddings and reranking."""
