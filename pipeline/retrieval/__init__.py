"""Dense retrieval: E5 encoders, flat faiss indexes, the Search-R1 HTTP API and its client."""
