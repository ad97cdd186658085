"""What a training checkpoint keeps besides weights, optimizer and random states: the state that
decides later floats and tokens, so a run resumed from a checkpoint computes what the
uninterrupted run computes from that step on.

- The retriever's query memory (a query keeps its first result, encoded in whatever batch it
  first came in; pipeline.retrieval.retriever): a resumed run would encode its queries in other
  bfloat16 batches.
- Each engine's prefix cache and recency clock (pipeline.engine.engine.Engine.state_dict): the
  policy's, which a dev evaluation leaves warm for the next rollout, and the frozen Teacher's and
  judge's, which are never cleared. Which prompts find a cached start decides which rows share a
  forward pass, hence the floating-point sums.

Saving beats emptying them at every checkpoint: emptying would change what an uninterrupted run
computes and cost the caches' reuse (docs/design.md#exact-resume). A backend without the
in-process engine (transformers on a GPU, SGLang over HTTP) and a retriever behind HTTP keep
their state elsewhere: nothing of theirs is saved, and their resume is not exact.
"""

from __future__ import annotations

from typing import Any

from pipeline.errors import InputError

RETRIEVER = "retriever"
ENGINES = "engines"


def _engines(backends: dict[str, Any]) -> dict[str, Any]:
    """The in-process engines of the named backends, each once (the Teacher is also the reference)."""
    out: dict[str, Any] = {}
    seen: set[int] = set()
    for role, backend in backends.items():
        engine = getattr(backend, "engine", None)
        if engine is not None and hasattr(engine, "state_dict") and id(engine) not in seen:
            seen.add(id(engine))
            out[role] = engine
    return out


def capture(retriever: Any, backends: dict[str, Any]) -> dict[str, Any]:
    """The run state of `retriever` and the engines of `backends` (role -> backend), as tensors,
    lists and plain numbers (torch.load(weights_only=True) reads it back)."""
    memory = retriever.memory_state() if hasattr(retriever, "memory_state") else None
    return {RETRIEVER: memory, ENGINES: {role: engine.state_dict() for role, engine in _engines(backends).items()}}


def restore(state: dict[str, Any], retriever: Any, backends: dict[str, Any]) -> None:
    """Put back what `capture` saw; the backends' weights must already be restored."""
    memory = state.get(RETRIEVER)
    if memory is not None and hasattr(retriever, "load_memory_state"):
        retriever.load_memory_state(memory)
    engines = _engines(backends)
    saved = state.get(ENGINES, {})
    if set(saved) != set(engines):
        raise InputError(f"checkpoint run state: engines {sorted(saved)}; this run has {sorted(engines)}")
    for role, engine in engines.items():
        engine.load_state_dict(saved[role])
