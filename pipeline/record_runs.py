"""One MLflow run for every stage, whether or not DVC ran it.

A stage opens its run only when its command runs. DVC skips a stage whose deps, params and
outputs match dvc.lock, and restores one from its run cache without running it, so a fresh
clone's `dvc repro` could leave the store without a run of, say, the report. After `dvc repro`
(`make repro` calls `python -m pipeline record-runs`; a Prefect task does the same for its
stage), each stage of dvc.lock is looked up in the store by the state dvc.lock records for it
(`dvc_state`: a hash of its lock entry):

- a run of the stage that started during this `dvc repro` (`since`) is the run that made that
  state: it is tagged with it (`dvc_outcome` = ran);
- a run already tagged with that state is kept as it is;
- otherwise a run is recorded: named after the stage like every run, tagged `dvc_outcome` (not
  run, and why) and `dvc_state`, with the stage's params from dvc.lock and what can be logged
  from its outputs without computing anything (the report folder, the Data Docs, an evaluation's
  records and metrics, the weights' hash and, when the store has no copy, the model itself).
  A recorded training run logs the curves of its stage's file (data/curves/<system>.csv, the
  stage's output) and names the run that trained the weights (tag `made_by_run`, from the
  stage's record in data/runs/); it never copies another run's metrics.

So every stage has a run whose `dvc_state` is the one dvc.lock holds. Links do not look runs up
here: they name the run id in the stage's record (data/runs/<stage>.json,
pipeline.tracking.links.run_link), the run that made its outputs; a recorded run writes no record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import Params
from pipeline.errors import InputError
from pipeline.paths import Paths, eval_dir, model_dir
from pipeline.report.curves import read_stage_curves, stage_curves_path
from pipeline.systems import BASE_WEIGHTS, BY_NAME
from pipeline.tracking.artifacts import KIND_TAG, WEIGHTS_SHA_TAG
from pipeline.tracking.runs import CurveLogger, experiment_name, flatten, stage_run, tracking_uri
from pipeline.tracking.stage_record import read_record

STATE_TAG = "dvc_state"  # sha256 of the stage's dvc.lock entry: the state the run stands for
OUTCOME_TAG = "dvc_outcome"  # ran | not run: <why>
NOTE_TAG = "mlflow.note.content"  # the run's description in MLflow's UI
MADE_BY_TAG = "made_by_run"  # on a recorded run: the run that made its outputs (its stage record), when known
SEARCH_PAGE_SIZE = 50  # runs per MLflow search page; the searches below read every page
OUTCOMES = {
    None: "not run: up to date, or restored from DVC's run cache (its outputs match dvc.lock)",
    "skipped": "not run: up to date (its deps, params and outputs match dvc.lock)",
    "restored": "not run: outputs restored from DVC's run cache",
}


@dataclass(frozen=True)
class Recorded:
    stage: str
    action: str  # tagged | present | recorded
    run_id: str


def lock_entries(root: Path) -> dict[str, dict]:
    """dvc.lock's entries of the stages dvc.yaml defines. DVC keeps the entry of a stage that
    was renamed or removed; such an entry has no stage, and gets no run."""
    from pipeline.dag import stage_names

    path = root / "dvc.lock"
    if not path.is_file():
        raise InputError(f"{path}: no dvc.lock; run `dvc repro` first")
    entries = (yaml.safe_load(path.read_text()) or {}).get("stages") or {}
    return {name: entries[name] for name in stage_names() if name in entries}


def dvc_state(entry: dict) -> str:
    return hashlib.sha256(json.dumps(entry, sort_keys=True, default=str).encode()).hexdigest()


def _params_of(entry: dict) -> dict[str, Any]:
    """The params dvc.lock recorded for the stage, by their params.yaml key."""
    out: dict[str, Any] = {}
    for values in (entry.get("params") or {}).values():
        out.update(values or {})
    return out


def _outs_note(entry: dict) -> str:
    outs = [f"{o['path']} (md5 {o.get('md5', '?')})" for o in entry.get("outs") or []]
    return "; ".join(outs) or "none"


def _search_pages(client: Any, experiment_id: str, query: str, order_by: list[str] | None = None) -> Iterable[Any]:
    """Every run matching `query`, page by page (each `make repro` adds runs with the same tags)."""
    token = None
    while True:
        page = client.search_runs([experiment_id], query, order_by=order_by, max_results=SEARCH_PAGE_SIZE,
                                  page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def _weights_logged(client: Any, experiment_id: str, sha: str, identity: dict[str, str]) -> bool:
    """Whether a run of this store logged these weights as a model under the same draw identity
    (seed set, CPU kind, precision: pipeline.draws.identity.draw_tags), so that each draw's
    registry versions stay its own."""
    runs = _search_pages(client, experiment_id, f"tags.{WEIGHTS_SHA_TAG} = '{sha}'")
    return any(r.data.tags.get("model_logged", "").startswith("yes")
               and all(r.data.tags.get(k) == v for k, v in identity.items()) for r in runs)


def _log_outputs(mlf: Any, client: Any, stage: str, params: Params, root: Path) -> str:
    """Log what the stage's outputs give without computing anything; returns a sentence for
    the note."""
    from pipeline.eval.run import model_fingerprint
    from pipeline.stage_io.run_logging import DRAW_KEYS, version_tags
    from pipeline.tracking.artifacts import log_model

    paths = Paths(root)
    kind, _, name = stage.partition("@")
    if stage == "validate_splits":
        from pipeline.stages.validate_splits import log_validation

        log_validation(mlf, paths.validation / "splits.json", paths.reports(params.profile) / "data_docs" / "splits")
        return "Its outcome and Data Docs are logged here."
    if stage == "validate_masks":
        from pipeline.tracking.artifacts import log_data_docs

        log_data_docs(mlf, paths.reports(params.profile) / "data_docs" / "masks")
        return "Its Data Docs are logged here."
    if stage == "report":
        from pipeline.stages.report import log_report, log_report_metrics

        metrics = root / "reports" / "metrics.json"
        log_report(mlf, paths.reports(params.profile), metrics)
        log_report_metrics(mlf, json.loads(metrics.read_text()))
        return "The report folder and its metrics are logged here."
    if kind == "evaluate":
        from pipeline.io import read_parquet
        from pipeline.stages.evaluate import evaluation_metrics, log_evaluation

        records = eval_dir(root, name) / "records.parquet"
        mlf.log_metrics(evaluation_metrics(read_parquet(records, f"the `{stage}` stage"), params.common.eval.runs))
        log_evaluation(mlf, records, model_fingerprint(BY_NAME[name].model_dir(root)), name)
        return "Its records and metrics, computed from them, are logged here."
    if stage == "base_model" or kind == "train":
        folder = model_dir(root, BASE_WEIGHTS if stage == "base_model" else name)
        sha = model_fingerprint(folder)
        mlf.set_tags({KIND_TAG: "base_model" if stage == "base_model" else "training", WEIGHTS_SHA_TAG: sha})
        experiment_id = mlf.active_run().info.experiment_id
        identity = version_tags(root, params.profile, stage)
        if _weights_logged(client, experiment_id, sha, {k: identity[k] for k in DRAW_KEYS}):
            mlf.set_tag("model_logged", "no: another run of this store logged these weights for this draw")
        else:
            log_model(mlf, folder, "base_model" if stage == "base_model" else name, identity,
                      params.tracking.log_model_max_mb)
        said = "Its weights' hash is tagged (and the model logged when the store had no copy)"
        if kind == "train":
            made = read_record(root, stage)
            if made is not None:
                mlf.set_tag(MADE_BY_TAG, made.run_id)
            curves = stage_curves_path(root, name)
            if not curves.is_file():
                return f"{said}; its stage wrote no curves file ({curves.relative_to(root)}), so it has no curves."
            points = _log_curve_file(mlf, read_stage_curves(curves, name))
            return (f"{said}; its {points} curve points are logged from {curves.relative_to(root)}, the stage's output"
                    + (f", made by run {made.run_id}." if made is not None else "."))
        return f"{said}."
    return ""


def _log_curve_file(mlf: Any, curve: Any) -> int:
    """The points of a training stage's curves file (pipeline.report.curves.read_stage_curves) as
    the active run's metric history, through the trainer's own CurveLogger; returns how many."""
    history = [{key: value for key, value in row.items() if key == "step" or value == value}  # NaN: not logged
               for row in curve.frame.to_dict("records")]
    return CurveLogger(mlf, every=None).restore(history)


def _newest(client: Any, experiment_id: str, query: str) -> Any:
    runs = client.search_runs([experiment_id], query, order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0] if runs else None


def _outcomes(stages: Iterable[str], default: str | None) -> dict[str, str | None]:
    """`NAME` or `NAME=OUTCOME` (skipped, restored, ran) -> {name: outcome}."""
    out = {}
    for item in stages:
        name, _, outcome = item.partition("=")
        outcome = outcome or default
        if outcome not in (*OUTCOMES, "ran"):
            raise InputError(f"record-runs: {item}: outcome: expected skipped, restored or ran, got {outcome!r}")
        out[name] = None if outcome == "ran" else outcome
    return out


def record_runs(params: Params, root: Path, since: float | None = None, stages: Iterable[str] | None = None,
                outcome: str | None = None) -> list[Recorded]:
    """Make sure each stage of dvc.lock (or each of `stages`) has a run of its current state
    (module doc). `since`: epoch seconds at which this `dvc repro` started; `outcome`
    ("skipped" or "restored") says why a stage without a run did not run, when known; a stage
    given as `NAME=OUTCOME` says it for itself."""
    from mlflow.tracking import MlflowClient

    from pipeline.tracking.runs import artifact_root, ensure_experiment

    entries = lock_entries(root)
    outcomes = _outcomes(entries if stages is None else stages, outcome)
    wanted = list(outcomes)
    missing = [s for s in wanted if s not in entries]
    if missing:
        raise InputError(f"record-runs: no dvc.lock entry for {', '.join(missing)}; run `dvc repro` first")
    uri = tracking_uri(root)
    ensure_experiment(params.profile, uri, artifact_root(root))
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name(experiment_name(params.profile)).experiment_id
    done = []
    for stage in wanted:
        entry = entries[stage]
        state = dvc_state(entry)
        quoted = stage.replace("'", "\\'")
        fresh = None
        if since is not None:
            fresh = _newest(client, experiment_id, f"tags.stage = '{quoted}' and attributes.status = 'FINISHED' "
                                                   f"and attributes.start_time >= {int(since * 1000)}")
        if fresh is not None:
            client.set_tag(fresh.info.run_id, STATE_TAG, state)
            client.set_tag(fresh.info.run_id, OUTCOME_TAG, "ran")
            done.append(Recorded(stage, "tagged", fresh.info.run_id))
            continue
        present = _newest(client, experiment_id, f"tags.stage = '{quoted}' and tags.{STATE_TAG} = '{state}'")
        if present is not None:
            done.append(Recorded(stage, "present", present.info.run_id))
            continue
        system = BY_NAME.get(stage.partition("@")[2])
        why = OUTCOMES[outcomes[stage]]
        tags = {**(system.run_tags if system else {}), STATE_TAG: state, OUTCOME_TAG: why}
        with stage_run(stage, params.profile, flatten(_params_of(entry)), tags=tags, root=root,
                       record=False) as mlf:
            try:
                logged = _log_outputs(mlf, client, stage, params, root)
            except (InputError, OSError) as error:  # a Prefect run root holds only some outputs
                logged = f"Its outputs are not in this checkout, so none is logged here ({error})."
            mlf.set_tag(NOTE_TAG, f"DVC did not run `{stage}` here: {why.removeprefix('not run: ')}. "
                                  f"This run records the state dvc.lock holds for it (tag `{STATE_TAG}`); its "
                                  f"outputs: {_outs_note(entry)}. {logged}".strip())
            done.append(Recorded(stage, "recorded", mlf.active_run().info.run_id))
    return done
