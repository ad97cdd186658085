"""The in-process generation engine: a continuous-batching scheduler over a KV pool, a prefix
cache, and Qwen3's forward pass over packed tokens (docs/design.md#the-engine).

- base.py: what the parts share: EngineConfig, EngineStats, and Request with its own state;
- qwen3.py: the forward pass as tensor functions over the Hugging Face module's own parameters;
- kv_pool.py: the KV pool, and its rows in length regions (compacted as requests end);
- attention.py: where each token's keys live and what it attends to (prefill, decode, packed segments);
- prefix_cache.py: a radix tree of cached prompt prefixes;
- scheduler.py: which waiting work runs next (`pick`, shared with teacher forcing), apart from running it;
- engine.py: the engine's steps (admit and prefill, decode, sample, stop, finish);
- teacher_forcing.py: scoring packed (prompt, response) pairs through the prefix cache;
- packed.py: the trainer's packed forward pass with gradients;
- backend.py: EngineBackend, the PolicyBackend the stages open on the CPU;
- memory.py: freed memory handed back to the system, oneDNN's kernel cache capped.
"""
