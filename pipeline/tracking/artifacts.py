"""What a stage logs inside its MLflow run besides params and metrics: the trained model
(registered), the training audit and curves, the evaluation records and the link to the
run of the weights they evaluated, the report.

Every function takes the active run's `mlflow` module (what `pipeline.tracking.runs.stage_run`
yields) and logs into that run. Paths logged as params or tags are relative to the
repository root.
"""

from __future__ import annotations

import logging
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pandas as pd

KIND_TAG = "kind"  # base_model | training | evaluation | report
WEIGHTS_SHA_TAG = "weights_sha256"  # on a training run: the hash of the weights it wrote
EVALUATED_SHA_TAG = "evaluated_weights_sha256"  # on an evaluation: the hash of the weights it ran
WEIGHTS_RUN_TAG = "weights_run_id"  # on an evaluation: the training run that wrote those weights
DATA_DOCS_ARTIFACT = "data_docs"  # on a validation run: its Great Expectations Data Docs site
PREVIEW_ROWS = 50  # rows of the readable audit preview
PREVIEW_CHARS = 400  # characters per text cell of the preview


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 2**20


def _requirements() -> list[str]:
    """Pinned from the running environment: MLflow's inference of them starts a subprocess
    that imports the model (seconds, and the tiny model's custom code paths)."""
    pins = []
    for name in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            pins.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            pass
    return pins


def log_model(mlf: Any, folder: Path, registered_name: str, tags: dict[str, str], max_mb: float) -> str | None:
    """Log a Hugging Face model folder with MLflow's transformers flavour and register it as
    `registered_name` (the new version tagged with `tags`), when it holds at most `max_mb`
    (0: never). Returns the model URI, or None when left out (the run's tag `model_logged`
    says why)."""
    size = folder_mb(folder)
    if not (Path(folder) / "config.json").is_file():
        mlf.set_tag("model_logged", f"no: {folder.name} holds no Hugging Face model (no config.json)")
        return None
    if max_mb <= 0 or size > max_mb:
        mlf.set_tag("model_logged", f"no: {size:.1f} MB, tracking.log_model_max_mb is {max_mb:g}")
        return None
    from mlflow.tracking import MlflowClient

    quiet = logging.getLogger("mlflow.transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # warnings about a model card and licence a local folder has not
    try:
        info = mlf.transformers.log_model(str(folder), name="model", task="text-generation",
                                          registered_model_name=registered_name, pip_requirements=_requirements())
    finally:
        quiet.setLevel(level)
    client = MlflowClient()
    for key, value in tags.items():
        client.set_model_version_tag(registered_name, str(info.registered_model_version), key, value)
    mlf.set_tag("model_logged", f"yes: {registered_name} version {info.registered_model_version}")
    return info.model_uri


def log_data_docs(mlf: Any, site: Path) -> bool:
    """A Great Expectations Data Docs site (its folder) under `data_docs/`, so the site opens from
    the MLflow server (pipeline.tracking.server's report route); False when there is none."""
    if not (Path(site) / "index.html").is_file():
        mlf.set_tag("data_docs", f"none: {Path(site).name} holds no index.html")
        return False
    mlf.log_artifacts(str(site), artifact_path=DATA_DOCS_ARTIFACT)
    return True


def _preview(samples: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in ("role", "workflow", "action", "malformed", "reward", "prompt_text", "response_text")
               if c in samples]
    head = samples[columns].head(PREVIEW_ROWS).copy()
    for column in ("prompt_text", "response_text"):
        if column in head:
            head[column] = head[column].astype(str).str[-PREVIEW_CHARS:]
    return head


def log_audit(mlf: Any, audit_root: Path) -> list[str]:
    """The first and the last audited step (`step-XXXX/` tables) under `audit/`, with a CSV
    preview of the last step's samples that MLflow's artifact view shows as a table."""
    steps = sorted(p for p in Path(audit_root).glob("step-*") if p.is_dir())
    chosen = sorted({steps[0], steps[-1]}) if steps else []
    for step in chosen:
        mlf.log_artifacts(str(step), artifact_path=f"audit/{step.name}")
    if chosen and (chosen[-1] / "samples.parquet").is_file():
        preview = _preview(pd.read_parquet(chosen[-1] / "samples.parquet"))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"samples_{chosen[-1].name}.csv"
            preview.to_csv(path, index=False)
            mlf.log_artifact(str(path), artifact_path="audit")
    return [s.name for s in chosen]


def log_curves(mlf: Any) -> int:
    """Every metric of the active run logged at more than one step, as `curves.csv` (step and
    one column per metric); returns the number of metrics."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    run = mlf.active_run()
    series = []
    for key in client.get_run(run.info.run_id).data.metrics:
        history = client.get_metric_history(run.info.run_id, key)
        if len({m.step for m in history}) > 1:
            frame = pd.DataFrame([(m.step, m.timestamp, m.value) for m in history], columns=["step", "ts", key])
            frame = frame.sort_values(["step", "ts"]).drop_duplicates("step", keep="last")
            series.append(frame.set_index("step")[key])
    if not series:
        return 0
    curves = pd.concat(series, axis=1).sort_index().rename_axis("step").reset_index()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "curves.csv"
        curves.to_csv(path, index=False)
        mlf.log_artifact(str(path))
    return len(series)


def weights_run(experiment_id: str, weights_sha256: str, system: str | None = None) -> str | None:
    """The finished run of the experiment that wrote weights with this hash: the newest one
    tagged with `system` when there is one (two trainings can write identical weights), else
    the newest."""
    from mlflow.tracking import MlflowClient

    runs = MlflowClient().search_runs(
        [experiment_id], f"tags.{WEIGHTS_SHA_TAG} = '{weights_sha256}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"], max_results=50)
    own = [r for r in runs if system is not None and r.data.tags.get("system") == system]
    return (own or runs)[0].info.run_id if runs else None


def link_weights(mlf: Any, weights_sha256: str, system: str | None = None) -> str | None:
    """Tag the active evaluation run with the run that wrote the weights it evaluated."""
    mlf.set_tag(EVALUATED_SHA_TAG, weights_sha256)
    run = weights_run(mlf.active_run().info.experiment_id, weights_sha256, system)
    mlf.set_tag(WEIGHTS_RUN_TAG, run or "not found")
    return run
