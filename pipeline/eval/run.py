"""The 4-run evaluation of one system (docs/method.md §7), resumable shard by shard.

Questions are cut, in file order, into shards of `shard_questions`, and shards, in order, into
blocks of `block_shards`. One rollout per shard runs every question `runs` times (n_traj = runs;
trajectory k is run k) with one Answerer candidate, sampled with the shard's own seed. The
rollouts of a block's shards are driven together (one scheduler for all of them,
pipeline.agents.driver), and each is written atomically to
`<out_dir>/shards/shard-00007.parquet` as soon as its last trajectory ends;
`<out_dir>/records.parquet` is the concatenation of all shards.

A block is a state boundary: it starts from an empty prefix cache and retriever memory and
shares no forward pass with another block, so what it computes depends on its own shards only.
A restarted evaluation skips the blocks whose shards are all on disk and computes the others
whole (a block cut by a kill, its finished shards included), so a killed and resumed
evaluation writes the same bytes as an uninterrupted one (docs/design.md#exact-resume). Which
rows share a forward pass inside a block decides its floating-point sums, hence a kill loses at
most one block of work.

`<out_dir>/shards/fingerprint.json` holds a hash of everything that determines the
records (questions, workflow config, runs, shard size, seed, system, the pipeline's source,
and the caller's extra parts such as the model weights); when it differs, the old shards are
discarded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.agents.workflows import question_rows, run_workflows
from pipeline.code_version import code_version
from pipeline.errors import InputError
from pipeline.eval.scoring import score_rollout
from pipeline.io import write_json, write_parquet
from pipeline.policy.base import PolicyBackend
from pipeline.policy.model_ref import hash_files
from pipeline.retrieval.base import Retriever

FINGERPRINT_FILE = "fingerprint.json"
ShardHook = Callable[[int, pd.DataFrame], None]


@dataclasses.dataclass
class EvalResult:
    records: pd.DataFrame
    shards: int  # shards in total
    computed: int  # shards run in this call
    reused: int  # finished shards found on disk and kept
    seconds: float


def shard_seed(seed: int, shard: int) -> int:
    """Sampling seed of one shard: a stable hash of (eval seed, shard index). Not of the system:
    every system draws the same random numbers for the same request (pipeline.agents.workflows),
    so in a paired gap between two systems the noise they share cancels (where their policies
    differ, their samples still differ)."""
    digest = hashlib.sha256(f"{seed}/{shard}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31


def shard_path(out_dir: Path, shard: int) -> Path:
    return Path(out_dir) / "shards" / f"shard-{shard:05d}.parquet"


def model_fingerprint(model_dir: Path) -> str:
    """Hash of a model folder's weight, config and tokenizer files."""
    model_dir = Path(model_dir)
    suffixes = (".json", ".safetensors", ".bin", ".model", ".txt", ".jinja")
    files = sorted(p.name for p in model_dir.iterdir() if p.is_file() and p.suffix in suffixes)
    if not files:
        raise InputError(f"{model_dir}: no weight or config files to evaluate")
    return hash_files(model_dir, files)


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _fingerprint(rows: list[dict], cfg: WorkflowConfig, runs: int, shard_questions: int, block_shards: int | None,
                 seed: int, system: str, workflow: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    parts = {
        "questions": _digest(rows), "config": dataclasses.asdict(cfg), "runs": runs,
        "shard_questions": shard_questions, "block_shards": block_shards, "seed": seed, "system": system,
        "workflow": workflow,
        "code": code_version(),  # shards of other code are recomputed
        "extra": dict(extra),
    }
    return {"fingerprint": _digest(parts), "parts": parts}


def _prepare_shard_dir(shard_dir: Path, fingerprint: dict[str, Any]) -> None:
    """Keep finished shards only when they were made with the same fingerprint."""
    shard_dir.mkdir(parents=True, exist_ok=True)
    stored_path = shard_dir / FINGERPRINT_FILE
    stored = None
    if stored_path.is_file():
        try:
            stored = json.loads(stored_path.read_text()).get("fingerprint")
        except (ValueError, AttributeError):
            stored = None
    if stored != fingerprint["fingerprint"]:
        for old in shard_dir.glob("shard-*.parquet"):
            old.unlink()
        write_json(stored_path, fingerprint)


def _finished(path: Path, rows: list[dict], runs: int) -> bool:
    """A shard file on disk that holds exactly the expected (question_id, run) pairs."""
    if not path.is_file():
        return False
    try:
        done = pd.read_parquet(path, columns=["question_id", "run"])
    except Exception:  # a foreign or damaged file: recompute the shard
        return False
    expected = {(r["question_id"], k) for r in rows for k in range(runs)}
    got = list(zip(done["question_id"], done["run"].astype(int)))
    return len(got) == len(expected) and set(got) == expected


def start_block(backend: PolicyBackend, retriever: Retriever) -> None:
    """Empty what earlier blocks left: the engine's prefix cache and the retriever's memory."""
    engine = getattr(backend, "engine", None)
    if engine is not None and hasattr(engine, "reset"):
        engine.reset()
    if hasattr(retriever, "forget"):
        retriever.forget()


def evaluate_system(
    questions: pd.DataFrame | list[dict],
    backend: PolicyBackend,
    retriever: Retriever,
    cfg: WorkflowConfig,
    runs: int,
    shard_questions: int,
    out_dir: str | Path,
    seed: int,
    *,
    system: str,
    workflow: str,
    fingerprint_extra: Mapping[str, Any] | None = None,
    on_shard: ShardHook | None = None,
    progress: bool = True,
    block_shards: int | None = None,
) -> EvalResult:
    """Evaluate `system` on every question `runs` times; write shards and records.parquet.

    `block_shards`: shards per block (None: one block of all shards). `on_shard(index,
    records)` is called after each newly computed shard is on disk (tests use it to simulate a
    kill). Returns the concatenated records.
    """
    if runs < 1 or shard_questions < 1 or (block_shards is not None and block_shards < 1):
        raise InputError(f"eval: runs, shard_questions and block_shards must be >= 1, got {runs}, {shard_questions}, "
                         f"{block_shards}")
    if cfg.n_candidates != 1:
        raise InputError("eval: expected 1 Answerer candidate (common.protocol.eval_candidates), "
                         f"got {cfg.n_candidates}")
    start = time.perf_counter()
    out_dir = Path(out_dir)
    rows = question_rows(questions)
    if not rows:
        raise InputError("eval: no test questions")
    fingerprint = _fingerprint(rows, cfg, runs, shard_questions, block_shards, seed, system, workflow,
                               fingerprint_extra or {})
    _prepare_shard_dir(out_dir / "shards", fingerprint)

    shards = [rows[i : i + shard_questions] for i in range(0, len(rows), shard_questions)]
    per_block = block_shards or len(shards)
    blocks = [list(range(b, min(b + per_block, len(shards)))) for b in range(0, len(shards), per_block)]
    todo = [block for block in blocks
            if not all(_finished(shard_path(out_dir, i), shards[i], runs) for i in block)]
    computed = sum(len(block) for block in todo)
    bar = tqdm(total=len(shards), initial=len(shards) - computed, desc=f"evaluate {system}", unit="shard",
               disable=not progress)

    for block in todo:
        def write_shard(position: int, rollout, block=block) -> None:
            index = block[position]
            records = score_rollout(rollout, system)
            write_parquet(shard_path(out_dir, index), records)
            bar.update(1)
            if on_shard is not None:
                on_shard(index, records)

        start_block(backend, retriever)
        run_workflows(workflow, [(shards[i], shard_seed(seed, i)) for i in block], backend, retriever, cfg,
                      n_traj=runs, on_rollout=write_shard)
    bar.close()
    reused = len(shards) - computed

    records = pd.concat([pd.read_parquet(shard_path(out_dir, i)) for i in range(len(shards))],
                        ignore_index=True)
    if records.duplicated(["question_id", "run"]).any() or len(records) != len(rows) * runs:
        raise RuntimeError(f"{out_dir}: shards hold {len(records)} records, expected {len(rows) * runs} unique")
    write_parquet(out_dir / "records.parquet", records)
    return EvalResult(records, len(shards), computed, reused, time.perf_counter() - start)
