"""Tables <-> verl agent-loop outputs: one AgentLoopOutput (one verl row) per model call.

verl 0.9.1's AgentLoopOutput is one sequence; its V1 trainer accepts a *list* of them from one
agent-loop run and stores each as its own row ("{uid}_{session}_{i}"). Our team makes many
calls per trajectory (Leader turns, Searchers, Answerer candidates), each a training sample, so
one run returns one output per row of the samples table, in table order:

  prompt_ids         the sample's prompt ids, as encoded at rollout
  response_ids       its response: generated turns with observations interleaved
  response_mask      tokens.loss_mask: 1 on generated tokens of a trained role, 0 on
                     observations (a Searcher's retrieved passages) and on untrained roles
  response_logprobs  tokens.old_logp: sampling log-probs (0.0 on observations)
  reward_score       samples.reward (NaN, an OPD Searcher, -> 0.0); verl's V1 worker
                     overwrites it with the last row's, so the advantage never reads it
  reward_extra_info  {"r_em": R_EM}, the same on every row of the trajectory
  extra_fields       maopd_sample (the samples row, prompt_ids aside), maopd_source and
                     maopd_teacher_logp (per response token), maopd_mode, maopd_opd_beta

`tables_from_rows` inverts this, from the outputs themselves (`rows_from_outputs`), from
verl's padded batch (`rows_from_batch`) or from verl V1's TransferQueue fields
(`rows_from_fields`), so the advantage sees exactly the in-process trainer's tables.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from pipeline.agents.records import SAMPLE_COLUMNS, TOKEN_COLUMNS
from pipeline.errors import InputError
from pipeline.rl.checks import require_columns

logger = logging.getLogger(__name__)

SAMPLE_KEY = "maopd_sample"
SOURCE_KEY = "maopd_source"
TEACHER_KEY = "maopd_teacher_logp"
MODE_KEY = "maopd_mode"
BETA_KEY = "maopd_opd_beta"
ROW_KEYS = (SAMPLE_KEY, SOURCE_KEY, TEACHER_KEY, MODE_KEY, BETA_KEY)


@dataclass
class Row:
    """One verl row, unpadded."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    logprobs: list[float]
    extra: dict[str, Any]


def _plain(value: Any) -> Any:
    """numpy scalars and arrays -> Python values (verl copies extra_fields into object arrays)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (np.ndarray, list, tuple)):
        return [_plain(v) for v in value]
    return value


def sample_rows(samples: pd.DataFrame, tokens: pd.DataFrame, mode: str, opd_beta: float) -> list[Row]:
    """One Row per sample (table order); tokens in `pos` order."""
    require_columns(samples, ["sample_id", "prompt_ids", "reward"], "samples")
    require_columns(tokens, ["sample_id", "pos", "token_id", "source", "loss_mask", "old_logp", "teacher_logp"],
                    "tokens")
    by_sample = {sid: t for sid, t in
                 tokens.sort_values(["sample_id", "pos"], kind="stable").groupby("sample_id", sort=False)}
    rows = []
    empty = tokens.iloc[:0]
    for record in samples.to_dict("records"):
        tok = by_sample.get(record["sample_id"], empty)
        sample = {k: _plain(v) for k, v in record.items() if k != "prompt_ids"}
        rows.append(Row(
            prompt_ids=[int(t) for t in record["prompt_ids"]],
            response_ids=tok["token_id"].astype(int).tolist(),
            response_mask=tok["loss_mask"].astype(int).tolist(),
            logprobs=tok["old_logp"].astype(float).tolist(),
            extra={SAMPLE_KEY: sample, SOURCE_KEY: tok["source"].astype(str).tolist(),
                   TEACHER_KEY: tok["teacher_logp"].astype(float).tolist(), MODE_KEY: mode, BETA_KEY: float(opd_beta)},
        ))
    return rows


def fit_lengths(row: Row, prompt_length: int | None, response_length: int | None) -> Row:
    """Cut a row to verl's rollout.prompt_length (from the left) and response_length, as verl's
    own agent loops do, with a warning (the tables keep the full sample)."""
    sid = row.extra[SAMPLE_KEY]["sample_id"]
    if prompt_length is not None and len(row.prompt_ids) > prompt_length:
        logger.warning("%s: prompt of %d tokens cut to rollout.prompt_length=%d", sid, len(row.prompt_ids),
                       prompt_length)
        row.prompt_ids = row.prompt_ids[-prompt_length:]
    if response_length is not None and len(row.response_ids) > response_length:
        logger.warning("%s: response of %d tokens cut to rollout.response_length=%d", sid, len(row.response_ids),
                       response_length)
        cut = slice(0, response_length)
        row.response_ids, row.response_mask, row.logprobs = (row.response_ids[cut], row.response_mask[cut],
                                                             row.logprobs[cut])
        row.extra[SOURCE_KEY], row.extra[TEACHER_KEY] = row.extra[SOURCE_KEY][cut], row.extra[TEACHER_KEY][cut]
    return row


def to_agent_loop_outputs(
    samples: pd.DataFrame,
    tokens: pd.DataFrame,
    mode: str,
    opd_beta: float,
    *,
    prompt_length: int | None = None,
    response_length: int | None = None,
    metrics: dict[str, float] | None = None,
    extra: dict[str, Any] | None = None,
) -> list:
    """The AgentLoopOutputs of one trajectory (see the module doc)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    outputs = []
    for row in sample_rows(samples, tokens, mode, opd_beta):
        row = fit_lengths(row, prompt_length, response_length)
        sample = row.extra[SAMPLE_KEY]
        reward = sample["reward"]
        # verl's V1 worker copies the last output's reward_score and reward_extra_info onto the
        # others (and fails without the latter): R_EM is the same on every row of a trajectory
        info = {"r_em": float(sample["r_em"])} if "r_em" in sample else {}
        outputs.append(AgentLoopOutput(
            prompt_ids=row.prompt_ids,
            response_ids=row.response_ids,
            response_mask=row.response_mask,
            response_logprobs=row.logprobs,
            reward_score=0.0 if reward is None or math.isnan(reward) else float(reward),
            num_turns=int(sample.get("n_turns", 1)) + 1,
            metrics=AgentLoopMetrics(**(metrics or {})),
            extra_fields={**row.extra, "turn_scores": [], "tool_rewards": [], "reward_extra_info": info,
                          **(extra or {})},
        ))
    return outputs


def rows_from_outputs(outputs: Iterable[Any]) -> list[Row]:
    return [
        Row(list(o.prompt_ids), list(o.response_ids), list(o.response_mask),
            list(o.response_logprobs or [0.0] * len(o.response_ids)), dict(o.extra_fields))
        for o in outputs
    ]


def rows_from_batch(batch: Any, non_tensor_batch: dict[str, np.ndarray]) -> tuple[list[Row], list[int]]:
    """Rows of a padded verl batch (verl's AgentLoopWorker layout: prompts left-padded,
    responses right-padded, attention_mask over both) and their batch indices; rows without our
    extra fields (verl's padding rows) are skipped."""
    prompts, responses = batch["prompts"], batch["responses"]
    width = prompts.shape[1]
    attention = batch["attention_mask"]
    logprobs = batch["rollout_log_probs"] if "rollout_log_probs" in batch.keys() else None
    samples = non_tensor_batch.get(SAMPLE_KEY)
    if samples is None:
        raise InputError(f"verl batch: no '{SAMPLE_KEY}' field; was it produced by the multiagent_opd_team agent loop?")
    rows, index = [], []
    for i in range(prompts.shape[0]):
        if not isinstance(samples[i], dict):
            continue
        index.append(i)
        n_prompt = int(attention[i, :width].sum())
        n_resp = int(attention[i, width:].sum())
        rows.append(Row(
            prompt_ids=prompts[i, width - n_prompt :].tolist(),
            response_ids=responses[i, :n_resp].tolist(),
            response_mask=batch["response_mask"][i, :n_resp].tolist(),
            logprobs=(logprobs[i, :n_resp].to(torch.float64).tolist() if logprobs is not None else [0.0] * n_resp),
            extra={k: non_tensor_batch[k][i] for k in ROW_KEYS},
        ))
    return rows, index


def _value(item: Any) -> Any:
    return getattr(item, "data", item)  # tensordict may hand back NonTensorData wrappers


def _unbind(tensor: Any) -> list:
    return list(tensor.unbind()) if tensor.is_nested else list(tensor.unbind(0))


def rows_from_fields(fields: Any, tags: Sequence[dict]) -> tuple[list[Row], list[int]]:
    """Rows of verl's V1 TransferQueue fields (one unpadded entry per row: prompts, responses,
    response_mask, rollout_log_probs as jagged tensors, extra_fields as non-tensor data) and
    their batch indices; rows tagged is_padding (verl's filler, a copy of a real row) are skipped."""
    prompts, responses = _unbind(fields["prompts"]), _unbind(fields["responses"])
    masks, logps = _unbind(fields["response_mask"]), _unbind(fields["rollout_log_probs"])
    extras = [_value(e) for e in list(fields["extra_fields"])]
    rows, index = [], []
    for i, tag in enumerate(tags):
        if tag.get("is_padding", False):
            continue
        if not isinstance(extras[i], dict) or SAMPLE_KEY not in extras[i]:
            raise InputError(f"verl row {i}: no '{SAMPLE_KEY}' extra field; was it produced by the team agent loop?")
        index.append(i)
        rows.append(Row(prompts[i].tolist(), responses[i].tolist(), masks[i].tolist(),
                        logps[i].to(torch.float64).tolist(), {k: extras[i][k] for k in ROW_KEYS}))
    return rows, index


def batch_setting(rows: Sequence[Row], key: str = MODE_KEY) -> Any:
    """The one value of a per-row setting (the mode, the OPD beta) over a batch."""
    values = {r.extra[key] for r in rows}
    if len(values) != 1:
        raise InputError(f"verl batch: expected one value of {key} over the rows, found {sorted(values, key=str)}")
    return values.pop()


def tables_from_rows(rows: Sequence[Row]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(samples, tokens) of verl rows: the tables the rows were made from (advantage 0)."""
    records, tok = [], {c: [] for c in TOKEN_COLUMNS}
    for row in rows:
        sample = dict(row.extra[SAMPLE_KEY])
        n = len(row.response_ids)
        source, teacher = list(row.extra[SOURCE_KEY]), list(row.extra[TEACHER_KEY])
        if not (len(row.response_mask) == len(row.logprobs) == len(source) == len(teacher) == n):
            raise InputError(f"verl row {sample.get('sample_id')!r}: response fields differ in length")
        records.append({**sample, "prompt_ids": [int(t) for t in row.prompt_ids]})
        tok["sample_id"] += [sample["sample_id"]] * n
        tok["pos"] += range(n)
        tok["token_id"] += [int(t) for t in row.response_ids]
        tok["role"] += [sample["role"]] * n
        tok["source"] += source
        tok["loss_mask"] += [int(m) for m in row.response_mask]
        tok["old_logp"] += [float(x) for x in row.logprobs]
        tok["teacher_logp"] += [float("nan") if x is None else float(x) for x in teacher]
        tok["advantage"] += [0.0] * n
    samples = pd.DataFrame(records)
    if len(samples):
        samples = samples[[c for c in SAMPLE_COLUMNS if c in samples] + [c for c in samples if c not in SAMPLE_COLUMNS]]
    tokens = pd.DataFrame({
        "sample_id": pd.Series(tok["sample_id"], dtype="str"),
        "pos": np.asarray(tok["pos"], dtype=np.int64),
        "token_id": np.asarray(tok["token_id"], dtype=np.int64),
        "role": pd.Series(tok["role"], dtype="str"),
        "source": pd.Series(tok["source"], dtype="str"),
        "loss_mask": np.asarray(tok["loss_mask"], dtype=np.int64),
        "old_logp": np.asarray(tok["old_logp"], dtype=np.float64),
        "teacher_logp": np.asarray(tok["teacher_logp"], dtype=np.float64),
        "advantage": np.asarray(tok["advantage"], dtype=np.float64),
    }, columns=TOKEN_COLUMNS)
    return samples, tokens


def tables_from_outputs(outputs: Iterable[Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return tables_from_rows(rows_from_outputs(outputs))
