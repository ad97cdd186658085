"""The in-process generation engine: a continuous-batching scheduler over a KV pool, a prefix
cache, and Qwen3's forward pass over packed tokens (docs/design.md#the-engine).

- qwen3.py: the forward pass as tensor functions over the Hugging Face module's own parameters;
- attention.py: the KV pool and where each token's keys live (prefill, decode, packed segments);
- prefix_cache.py: a radix tree of cached prompt prefixes;
- engine.py: the scheduler (admission, prefill, decode, stop, finish);
- teacher_forcing.py: scoring packed (prompt, response) pairs through the prefix cache;
- packed.py: the trainer's packed forward pass with gradients;
- backend.py: EngineBackend, the PolicyBackend the stages open on the CPU;
- memory.py: freed memory handed back to the system, oneDNN's kernel cache capped.
"""
