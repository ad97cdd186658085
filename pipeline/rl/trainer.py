"""The in-process trainer of Stage I (Teacher) and Stage II (MultiAgent-OPD, ablations, Prompted
Critic): one loop, one shared model for all roles, CPU or one GPU.

One step (`train` below, top to bottom):
  1. draw `oversample` x `questions_per_batch` training questions from (seed, step), so a resumed
     run draws the same ones; roll out the system's workflow (cascade for the Teacher, hierarchy
     otherwise) with `trajectories_per_question` trajectories and `train_candidates` Answerer
     candidates;
  2-5. pipeline.rl.batch_rewards.rewarded_tables: tables with the system's trained roles,
     Teacher scoring (one teacher-forced pass per sample with a loss token, on exactly the
     student's context), the Prompted-Critic judge's scores, rewards; with oversample > 1, dynamic sampling
     (pipeline.rl.group_filter) keeps the first `questions_per_batch` questions whose
     trajectories' team outcome differs; -> advantages (compute_advantages; GRPO groups tied
     on `tie_on` get 0);
  6. audit tables at step 0 and every `audit_every` steps (pipeline.rl.audit; fails on a
     mask violation);
  7. PPO: one pass in `n_minibatches` shuffled minibatches (one AdamW update each): new
     log-probs and entropy with gradients on the recorded token ids (never re-tokenised), verl's
     vanilla clipped loss with token-mean, entropy bonus, gradient clip;
  8. dev evaluation at step 0, every `eval_every` steps and at the end; checkpoint every
     `checkpoint_every` steps and at the end (pipeline.rl.checkpoint, with the run state of
     pipeline.rl.run_state: the retriever's memory and the engines' caches, so a resumed run
     computes what an uninterrupted one does, bit for bit); metrics to `log_fn`.

What each system trains, with which Teacher and judge, is its record in pipeline.systems. The
Stage-II student always starts from the base weights; the Teacher and the judge are frozen.

Metric keys (per step): reward_leader, reward_searcher, reward_answerer (mean `reward` of the
role's samples; absent where the role has no scalar reward, e.g. OPD Searchers), kl_to_teacher
(token mean of old_logp - teacher_logp over scored loss tokens), entropy, clip_fraction, pg_loss
(means over the minibatches), tokens_per_second (generated tokens of the rollout / step wall
time), judge_unparsable, trained_questions, informative_share (dynamic sampling only: the share
of drawn questions whose trajectories' outcome differs), and the diagnostics of
pipeline.rl.diagnostics (zero_adv_groups_<role>, tied_groups_<role>, abs_adv_<role>_<grpo|opd>, searcher_kl_sampled,
no_search_share); dev metrics (at completed-step
counts): dev_em (strict extraction), dev_no_search_share, format_failure_rate,
searches_per_workflow, dev_searches_per_searcher_call, dev_searcher_fidelity (the Searcher's
fidelity, pipeline.eval.funnel), and for Stage-II runs dev_searcher_kl (token-mean KL of the policy to the
Stage-I Teacher on fixed dev Searcher contexts).
Training metrics of step s are logged at MLflow step s; dev metrics after k updates at step k.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from pipeline.agents import run_workflow
from pipeline.code_version import code_version
from pipeline.data.dev_sample import dev_sample
from pipeline.engine.memory import give_back
from pipeline.engine.packed import group_by_prompt, packed_logprobs, token_budget_parts
from pipeline.errors import InputError
from pipeline.eval.scoring import score_rollout
from pipeline.policy.base import PolicyBackend
from pipeline.policy.encoding import truncate_left
from pipeline.policy.hf_backend import HFBackend
from pipeline.policy.logprobs import pack_prompt_response, response_logprobs
from pipeline.retrieval.base import Retriever
from pipeline.rl import run_state
from pipeline.rl.advantages import compute_advantages
from pipeline.rl.audit import write_audit
from pipeline.rl.batch import pad_column
from pipeline.rl.batch_rewards import require_scorers, rewarded_tables
from pipeline.rl.checkpoint import load_latest, save_checkpoint
from pipeline.rl.diagnostics import Contexts, advantage_diagnostics, searcher_contexts, searcher_kl
from pipeline.rl.group_filter import filter_batch
from pipeline.rl.loss import length_buckets, minibatches, policy_loss
from pipeline.rl.teacher_scoring import sample_token_ids
from pipeline.rl.train_params import KEEP_CHECKPOINTS, DevSettings, TrainConfig
from pipeline.systems import System, trained_system

# Padded tokens per forward/backward pass in the PPO update. Only memory and speed depend on it:
# micro-batches accumulate to the minibatch's exact token-mean gradient.
MICRO_BATCH_TOKENS = 8192

LogFn = Callable[[int, dict], None]
CheckpointFn = Callable[[int], None]


@dataclass
class TrainInputs:
    """What a run trains on. `policy.model` is trained in place."""

    policy: HFBackend
    retriever: Retriever
    train_questions: pd.DataFrame
    dev_questions: pd.DataFrame
    teacher: PolicyBackend | None = None
    judge: PolicyBackend | None = None
    checkpoint_dir: Path | None = None
    audit_dir: Path | None = None
    # The Stage-I Teacher, for the dev KL diagnostic of Stage-II runs (the same for every
    # Stage-II system, whichever Teacher it trains with); None: no KL diagnostic
    reference: HFBackend | None = None
    # the shared Stage-II start (stage2_start), instead of computing the contexts and step 0's dev metrics
    start: SharedStart | None = None
    # checkpoint.inputs_fingerprint of the weights and questions, so a checkpoint made from
    # other inputs is not resumed
    inputs_fingerprint: str = ""
    checkpoint_meta: dict[str, str] = field(default_factory=dict)  # kept in every checkpoint (the MLflow run id)


@dataclass
class Batch:
    samples: pd.DataFrame
    tokens: pd.DataFrame
    generated_tokens: int
    judge_unparsable: int = 0
    drawn_questions: int = 0
    informative_questions: int | None = None  # dynamic sampling only: drawn questions with differing outcomes


@dataclass
class TrainResult:
    steps: int
    resumed_from: int  # completed steps found in a checkpoint (0: fresh start)
    history: list[dict] = field(default_factory=list)  # {"step": s, **metrics}, as logged


def _seed(*parts: int) -> int:
    return int(np.random.default_rng([int(p) for p in parts]).integers(2**31 - 1))


def check_inputs(cfg: TrainConfig, inputs: TrainInputs) -> None:
    """Bad set-ups fail before any work, naming the field."""
    require_scorers(trained_system(cfg.system), inputs.teacher, inputs.judge)
    if len(inputs.train_questions) == 0:
        raise InputError("train_questions: expected at least one training question")
    if len(inputs.dev_questions) == 0:
        raise InputError("dev_questions: expected at least one dev question")


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=cfg.lr, betas=(float(cfg.optim.adam_betas[0]), float(cfg.optim.adam_betas[1])),
        weight_decay=cfg.optim.weight_decay,
    )


# --------------------------------------------------------------------------- one rollout batch


def collect_batch(cfg: TrainConfig, inputs: TrainInputs, step: int) -> Batch:
    """Rollout -> tables -> Teacher scores -> judge scores -> rewards -> advantages."""
    system = trained_system(cfg.system)
    pool = inputs.train_questions
    rng = np.random.default_rng([cfg.seed, step, 0])
    drawn = min(cfg.oversample * cfg.questions_per_batch, len(pool))
    picked = np.sort(rng.choice(len(pool), size=drawn, replace=False))
    rollout = run_workflow(
        system.workflow, pool.iloc[picked], inputs.policy, inputs.retriever, cfg.rollout,
        n_traj=cfg.trajectories_per_question, seed=_seed(cfg.seed, step, 1),
    )
    tables = rewarded_tables(rollout, system, cfg.rewards, inputs.teacher, inputs.judge, cfg.judge_max_new_tokens,
                             cfg.searcher_outcome)
    samples, tokens = tables.samples, tables.tokens
    generated = int((tokens["source"] == "generated").sum())
    informative = None
    if cfg.oversample > 1:
        samples, tokens, informative = filter_batch(samples, tokens, cfg.questions_per_batch)
    tokens = compute_advantages(samples, tokens, system, cfg.opd_beta, cfg.tie_on)
    return Batch(samples, tokens, generated, tables.judge_unparsable, drawn, informative)


# --------------------------------------------------------------------------- PPO update


def ppo_update(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, policy: HFBackend, batch: Batch,
    cfg: TrainConfig, seed: int,
) -> dict[str, float]:
    """One pass over the batch in shuffled minibatches, one optimizer update each."""
    tokens, samples = batch.tokens, batch.samples
    with_loss = set(tokens.loc[tokens["loss_mask"].to_numpy() > 0, "sample_id"])
    sample_ids = np.array([s for s in samples["sample_id"] if s in with_loss], dtype=object)
    if len(sample_ids) == 0:
        raise InputError("tokens.loss_mask: the rollout batch has no loss token")
    prompt_of = samples.set_index("sample_id")["prompt_ids"]
    response_of = sample_token_ids(tokens[tokens["sample_id"].isin(with_loss)])
    temperature = cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0
    parts = minibatches(len(sample_ids), min(cfg.optim.n_minibatches, len(sample_ids)), seed)
    stats: dict[str, list[float]] = {"pg_loss": [], "clip_fraction": [], "entropy": [], "grad_norm": []}
    passes = packed_passes if getattr(policy, "weights", None) is not None else padded_passes
    model.train()
    for part in parts:
        ids = sample_ids[part]
        responses = [response_of[s] for s in ids]
        prompts = [truncate_left(prompt_of[s], policy.max_context - len(r)) for s, r in zip(ids, responses)]
        tok = tokens[tokens["sample_id"].isin(set(ids))]
        loss_tokens = float(tok["loss_mask"].sum())
        sums = {"pg_loss": 0.0, "clip_fraction": 0.0, "entropy": 0.0}
        optimizer.zero_grad(set_to_none=True)
        for micro_ids, new_logp, entropy, columns in passes(policy, model, ids, prompts, responses, tok, temperature,
                                                            entropy_grad=cfg.entropy_coef != 0):
            old, adv, mask = columns("old_logp"), columns("advantage"), columns("loss_mask")
            if old.shape != new_logp.shape:
                raise RuntimeError(f"tables {tuple(old.shape)} != responses {tuple(new_logp.shape)}")
            if mask.sum() == 0:
                continue
            loss, m = policy_loss(
                new_logp, old, adv, mask, entropy, clip_ratio=cfg.optim.clip_ratio,
                clip_ratio_c=cfg.optim.clip_ratio_c, entropy_coef=cfg.entropy_coef,
            )
            if not torch.isfinite(loss):
                raise FloatingPointError(f"PPO loss is {loss.item()} at a micro-batch of {len(micro_ids)} samples")
            share = float(mask.sum()) / loss_tokens  # token-mean over the minibatch = share-weighted sum
            (loss * share).backward()
            for key, value in (("pg_loss", m["pg_loss"]), ("clip_fraction", m["pg_clipfrac"]),
                               ("entropy", m["entropy"])):
                sums[key] += share * float(value)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        for key, value in (*sums.items(), ("grad_norm", float(grad_norm))):
            stats[key].append(value)
    return {key: float(np.mean(values)) for key, values in stats.items()}


def packed_passes(policy, model, ids, prompts, responses, tok, temperature, entropy_grad):
    """Micro-batches of the packed pass (pipeline.engine.packed): samples sharing a prompt in one
    segment, no padding; every tensor (1, response tokens of the micro-batch)."""
    groups = group_by_prompt(prompts, responses)
    for part in token_budget_parts(groups, MICRO_BATCH_TOKENS):
        order = [i for g in part for i in g.members]
        micro_ids = ids[order]
        lengths = [len(responses[i]) for i in order]
        new_logp, entropy = packed_logprobs(policy.weights, part, temperature, entropy_grad, policy.device)
        micro_tok = tok[tok["sample_id"].isin(set(micro_ids))]

        def columns(name, micro_ids=micro_ids, lengths=lengths, micro_tok=micro_tok, dtype=new_logp.dtype):
            matrix = pad_column(micro_tok, micro_ids, name, dtype=dtype)
            return torch.cat([matrix[row, :n] for row, n in enumerate(lengths)])[None].to(policy.device)

        yield micro_ids, new_logp[None], entropy[None], columns


def padded_passes(policy, model, ids, prompts, responses, tok, temperature, entropy_grad):
    """Micro-batches of the padded pass ([left-padded prompt | right-padded response] rows through
    the transformers module), for a backend without the engine's weights."""
    for micro in length_buckets([len(p) for p in prompts], [len(r) for r in responses], MICRO_BATCH_TOKENS):
        micro_ids = ids[micro]
        packed = pack_prompt_response([prompts[i] for i in micro], [responses[i] for i in micro],
                                      policy.pad_id, policy.device)
        new_logp, entropy = response_logprobs(
            model, packed.input_ids, packed.attention_mask, packed.response_length,
            temperature=temperature, position_ids=packed.position_ids, compute_entropy=True,
        )
        micro_tok = tok[tok["sample_id"].isin(set(micro_ids))]

        def columns(name, micro_ids=micro_ids, micro_tok=micro_tok, dtype=new_logp.dtype):
            return pad_column(micro_tok, micro_ids, name, dtype=dtype).to(policy.device)

        yield micro_ids, new_logp, entropy if entropy_grad else entropy.detach(), columns


# --------------------------------------------------------------------------- metrics


def batch_metrics(batch: Batch, system: System, tie_on: str = "reward") -> dict[str, float]:
    """Mean reward per role, the token-mean KL of the student to the Teacher, and the advantage
    diagnostics of pipeline.rl.diagnostics."""
    out: dict[str, float] = {}
    rewards = batch.samples.groupby("role")["reward"].mean()
    for role in ("leader", "searcher", "answerer"):
        if role in rewards.index and np.isfinite(rewards[role]):
            out[f"reward_{role}"] = float(rewards[role])
    tok = batch.tokens
    scored = (tok["loss_mask"].to_numpy() > 0) & tok["teacher_logp"].notna().to_numpy()
    if scored.any():
        out["kl_to_teacher"] = float((tok["old_logp"][scored] - tok["teacher_logp"][scored]).mean())
    out["samples"] = float(len(batch.samples))
    out["loss_tokens"] = float((tok["loss_mask"] > 0).sum())
    out["judge_unparsable"] = float(batch.judge_unparsable)
    out["trained_questions"] = float(batch.samples["question_id"].nunique())
    if batch.informative_questions is not None:
        out["informative_share"] = batch.informative_questions / batch.drawn_questions
    out.update(advantage_diagnostics(batch.samples, tok, system, tie_on))
    return out


def dev_evaluate(dev: DevSettings, workflow: str, inputs: TrainInputs,
                 contexts: Contexts | None = None) -> dict[str, float]:
    """Dev EM (strict extraction), no-search share, format-failure rate, searches per workflow,
    searches per Searcher call and the Searcher's fidelity (pipeline.eval.funnel: the share of
    Searcher calls that read a hop answer whose report kept it);
    one trajectory and one Answerer candidate per question, the same sampling seed at every
    evaluation of every system (`reference_seed`), so systems that start from the same weights
    start from the same dev EM.
    With fixed Searcher `contexts` and a reference Teacher: dev_searcher_kl, the token-mean
    KL(policy || reference) on them."""
    questions = dev_sample(inputs.dev_questions, dev.dev_questions, dev.reference_seed)
    rollout = run_workflow(workflow, questions, inputs.policy, inputs.retriever, dev.dev_rollout,
                           n_traj=1, seed=dev.reference_seed)
    records = score_rollout(rollout)
    calls, read = records["searcher_calls"].sum(), records["searcher_calls_read"].sum()
    return {
        "dev_em": float(records["strict_correct"].mean()),
        "dev_no_search_share": float((records["search_actions"] == 0).mean()),
        "format_failure_rate": float(records["format_failure"].mean()),
        "searches_per_workflow": float(records["search_actions"].mean()),
        "dev_searches_per_searcher_call": float(records["search_actions"].sum() / calls) if calls else math.nan,
        "dev_searcher_fidelity": float(records["searcher_calls_kept"].sum() / read) if read else math.nan,
    } | ({} if contexts is None or inputs.reference is None else {
        "dev_searcher_kl": searcher_kl(inputs.policy.model, inputs.reference.model, contexts, inputs.policy.pad_id,
                                       inputs.policy.device, inputs.policy.max_batch_tokens),
    })


def reference_contexts(dev: DevSettings, inputs: TrainInputs) -> Contexts | None:
    """The fixed Searcher contexts of the dev KL diagnostic: the reference Teacher's own Searcher
    calls in the hierarchy on the dev questions, at dev sampling with `reference_seed`."""
    if inputs.reference is None:
        return None
    rollout = run_workflow("hierarchy", dev_sample(inputs.dev_questions, dev.dev_questions, dev.reference_seed),
                           inputs.reference, inputs.retriever, dev.dev_rollout, n_traj=1, seed=dev.reference_seed)
    return searcher_contexts(rollout)


@dataclass(frozen=True)
class SharedStart:
    """What every Stage-II run starts from: the reference Teacher's dev Searcher contexts and the
    base model's dev metrics before any update (step 0). The five Stage-II systems share their
    weights, dev questions and seeds at step 0, so this is computed once (the `stage2_start`
    stage) and read by each of them."""

    contexts: Contexts
    metrics: dict[str, float]


def shared_start(dev: DevSettings, inputs: TrainInputs) -> SharedStart:
    """The SharedStart of `inputs.policy` (the base model) against `inputs.reference` (the Teacher)."""
    contexts = reference_contexts(dev, inputs)
    if contexts is None:
        raise InputError("reference: the shared Stage-II start needs the Stage-I Teacher as reference")
    return SharedStart(contexts, dev_evaluate(dev, "hierarchy", inputs, contexts))


def checkpoint_fingerprint(cfg: TrainConfig, inputs_fingerprint: str) -> str:
    """What a checkpoint must match to be resumed: the training numbers (steps excepted), the
    inputs and the pipeline's source (a checkpoint of other code is never resumed)."""
    return f"{cfg.fingerprint()}-{inputs_fingerprint}-code-{code_version()}"


def _backends(inputs: TrainInputs) -> dict[str, object]:
    """The models of a run whose engines carry state from step to step."""
    return {role: backend for role, backend in (("policy", inputs.policy), ("teacher", inputs.teacher),
                                                 ("judge", inputs.judge), ("reference", inputs.reference))
            if backend is not None}


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}


# --------------------------------------------------------------------------- the loop


def train(cfg: TrainConfig, inputs: TrainInputs, log_fn: LogFn | None = None,
          on_checkpoint: CheckpointFn | None = None) -> TrainResult:
    """Train `inputs.policy.model` in place for `cfg.steps` steps (resuming from a checkpoint, whose
    metric history `result.history` starts with). `on_checkpoint(done)` follows each checkpoint
    written: everything logged so far is then on disk."""
    check_inputs(cfg, inputs)
    policy, model = inputs.policy, inputs.policy.model
    optimizer = make_optimizer(model, cfg)
    fingerprint = checkpoint_fingerprint(cfg, inputs.inputs_fingerprint)
    resumed = load_latest(inputs.checkpoint_dir, model, optimizer, fingerprint) if inputs.checkpoint_dir else None
    start = resumed.step if resumed else 0
    result = TrainResult(steps=cfg.steps, resumed_from=start, history=list(resumed.history) if resumed else [])

    def log(step: int, metrics: dict[str, float]) -> None:
        metrics = _finite(metrics)
        result.history.append({"step": step, **metrics})
        if log_fn is not None:
            log_fn(step, metrics)

    workflow = trained_system(cfg.system).workflow
    contexts = inputs.start.contexts if inputs.start is not None else reference_contexts(cfg.dev, inputs)
    if resumed:  # after the reference's rollout above, which every run makes from a cold start
        run_state.restore(resumed.run_state, inputs.retriever, _backends(inputs))
    if start == 0:
        log(0, dict(inputs.start.metrics) if inputs.start is not None else
            dev_evaluate(cfg.dev, workflow, inputs, contexts))
    bar = tqdm(range(start, cfg.steps), desc=f"train {cfg.system}", initial=start, total=cfg.steps, leave=False)
    for step in bar:
        began = time.perf_counter()
        batch = collect_batch(cfg, inputs, step)
        if inputs.audit_dir is not None and step % cfg.audit_every == 0:
            write_audit(inputs.audit_dir, step, batch.samples, batch.tokens, policy.decode)
        update = ppo_update(model, optimizer, policy, batch, cfg, _seed(cfg.seed, step, 2))
        give_back()  # the pass's activations, freed, back to the system (pipeline.engine.memory)
        seconds = time.perf_counter() - began
        metrics = {**batch_metrics(batch, trained_system(cfg.system), cfg.tie_on), **update,
                   "tokens_per_second": batch.generated_tokens / seconds, "step_seconds": seconds}
        log(step, metrics)
        bar.set_postfix(pg_loss=f"{update['pg_loss']:.3g}", sec=f"{seconds:.1f}")
        done = step + 1
        if done % cfg.eval_every == 0 or done == cfg.steps:
            log(done, dev_evaluate(cfg.dev, workflow, inputs, contexts))
        if inputs.checkpoint_dir is not None and (done % cfg.checkpoint_every == 0 or done == cfg.steps):
            save_checkpoint(inputs.checkpoint_dir, done, model, policy.tokenizer, optimizer, fingerprint,
                            keep=KEEP_CHECKPOINTS, history=result.history, meta=inputs.checkpoint_meta,
                            run_state=run_state.capture(inputs.retriever, _backends(inputs)))
            if on_checkpoint is not None:
                on_checkpoint(done)
    return result
