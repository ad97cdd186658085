"""MLflow helper every stage uses: one experiment per profile, one run per stage.

The tracking URI is `sqlite:///<repo>/mlflow.db` unless MLFLOW_TRACKING_URI is set
(MLflow's ./mlruns file store is not used: it is deprecated and errors here).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

REPO_ROOT = Path(__file__).resolve().parents[1]


def tracking_uri(root: Path | None = None) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(root or REPO_ROOT) / 'mlflow.db'}"


# Tracked files that DVC stages rewrite: the lock and the `cache: false` outputs under
# reports/. They change on every `dvc repro`, so they do not make the code dirty.
GENERATED_PATHS = ("dvc.lock", "reports")


def git_commit(root: Path | None = None) -> str:
    """The checkout's commit, `-dirty` when code differs from it (tracked changes or new
    files, outside GENERATED_PATHS); MAOPD_GIT_COMMIT wins, for stages that run in a copy
    of the checkout (Prefect workspaces) that is not a git repo."""
    if os.environ.get("MAOPD_GIT_COMMIT"):
        return os.environ["MAOPD_GIT_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root or REPO_ROOT, capture_output=True, text=True, timeout=10
        )
        sha = out.stdout.strip() if out.returncode == 0 else ""  # no commit yet: git prints "HEAD"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", *(f":(exclude){p}" for p in GENERATED_PATHS)],
            cwd=root or REPO_ROOT, capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists are kept as their string form."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def experiment_name(profile: str) -> str:
    return f"multiagent-opd-{profile}"


def artifact_root(root: Path | None = None) -> str:
    return os.environ.get("MLFLOW_ARTIFACT_ROOT") or ((root or REPO_ROOT) / "mlartifacts").as_uri()


# MLflow 3's UI opens an experiment in its GenAI view (traces) unless this tag says otherwise.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def ensure_experiment(profile: str, uri: str, artifacts: str) -> str:
    """Create the store (a new sqlite file is migrated on first use) and the profile's
    experiment if missing, tagged to open in MLflow's model-training view; safe when several
    stages start at once."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    name = experiment_name(profile)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            client.create_experiment(name, artifact_location=artifacts, tags=dict([EXPERIMENT_KIND]))
        except MlflowException:
            if client.get_experiment_by_name(name) is None:  # not a lost race: a real error
                raise
    elif experiment.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
        client.set_experiment_tag(experiment.experiment_id, *EXPERIMENT_KIND)
    return name


@contextlib.contextmanager
def stage_run(stage: str, profile: str, params: Mapping[str, Any] | None = None,
              tags: Mapping[str, str] | None = None, root: Path | None = None) -> Iterator[Any]:
    """Open an MLflow run named after the stage, with params and the standard tags.

    Yields the mlflow module, so callers write `mlf.log_metric(...)` inside the block.
    """
    import mlflow

    mlflow.set_tracking_uri(tracking_uri(root))
    name = ensure_experiment(profile, tracking_uri(root), artifact_root(root))
    mlflow.set_experiment(name)
    with mlflow.start_run(run_name=stage):
        mlflow.set_tags({"stage": stage, "profile": profile, "git_commit": git_commit(root), **(tags or {})})
        if params:
            flat = {k: str(v)[:6000] for k, v in flatten(params).items()}
            items = list(flat.items())
            for i in range(0, len(items), 100):
                mlflow.log_params(dict(items[i : i + 100]))
        yield mlflow


class CurveLogger:
    """A training curve for the active MLflow run, sent `every` steps in one batch instead
    of one synchronous call per step (~3 ms each on the SQLite store: seconds over a few
    thousand steps). Use as `log_fn(step, metrics)`; `flush()` (or leaving the `with`
    block) sends the rest."""

    def __init__(self, mlf: Any, prefix: str, every: int = 100):
        from mlflow.entities import Metric

        if every < 1:
            raise ValueError(f"every: expected >= 1, got {every}")
        self._metric = Metric
        self._mlf, self._prefix, self._every = mlf, prefix, every
        self._pending: list[Any] = []
        self._steps = 0

    def __call__(self, step: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        self._pending += [self._metric(f"{self._prefix}_{k}", float(v), now, step) for k, v in metrics.items()]
        self._steps += 1
        if self._steps % self._every == 0:
            self.flush()

    def flush(self) -> None:
        from mlflow.tracking import MlflowClient

        run = self._mlf.active_run()
        if run is None:
            raise RuntimeError("CurveLogger: no active MLflow run to log the curve to")
        client = MlflowClient()
        for start in range(0, len(self._pending), 1000):  # MLflow's limit per batch
            client.log_batch(run.info.run_id, metrics=self._pending[start : start + 1000])
        self._pending = []

    def __enter__(self) -> "CurveLogger":
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.flush()
