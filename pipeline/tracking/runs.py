"""MLflow helper every stage uses: one experiment per profile, one run per stage.

The tracking URI is `sqlite:///<repo>/mlflow.db` unless MLFLOW_TRACKING_URI is set
(MLflow's ./mlruns file store is not used: it is deprecated and errors here).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.code_version import code_version
from pipeline.draws.identity import draw_tags, other_threads
from pipeline.provenance import git_commit
from pipeline.tracking.stage_record import StageRecord, write_record

REPO_ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)


def tracking_uri(root: Path | None = None) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(root or REPO_ROOT) / 'mlflow.db'}"


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


# Tags of the process that holds a run, so the next start on this host can tell a run whose
# process died (SIGKILL, power loss) from one still running.
HOST_TAG, PID_TAG, PID_STARTED_TAG = "host", "pid", "pid_started"
ATTEMPT_TAG = "attempt"  # 1 for a new run, +1 each time a resumed stage continues it
END_REASON_TAG = "end_reason"  # why a run ended FAILED or KILLED


class StageTerminated(SystemExit):
    """SIGTERM reached a stage: raised in its main thread so that its MLflow run ends KILLED;
    the process exits with 143 (128 + SIGTERM), as it would have without the handler."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise StageTerminated(128 + signum)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises StageTerminated inside the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def process_started(pid: int) -> str:
    import psutil

    return f"{psutil.Process(pid).create_time():.2f}"


def _alive(pid: str | None, started: str | None) -> bool:
    """Whether the process that tagged a run still runs (and is the same process, not a new
    one that reuses its pid)."""
    import psutil

    try:
        proc = psutil.Process(int(pid or ""))
        return proc.status() != psutil.STATUS_ZOMBIE and f"{proc.create_time():.2f}" == started
    except (ValueError, psutil.Error):
        return False


def _last_activity(client: Any, run: Any) -> int:
    """The time of a run's last logged metric (ms), or its start."""
    times = [run.info.start_time or 0]
    for key in run.data.metrics:
        times += [m.timestamp for m in client.get_metric_history(run.info.run_id, key)]
    return max(times)


def mark_dead_runs(client: Any, experiment_id: str) -> list[str]:
    """Mark KILLED the RUNNING runs of the experiment that a process of this host held and
    that process is gone (killed by SIGKILL, the OOM killer, a power cut: nothing could end the
    run then). The end time is the run's last logged activity. Returns their ids. Runs of other
    hosts are left alone: their liveness cannot be seen from here."""
    host = socket.gethostname()
    dead = []
    for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        if tags.get(HOST_TAG) != host or _alive(tags.get(PID_TAG), tags.get(PID_STARTED_TAG)):
            continue
        client.set_tag(run.info.run_id, END_REASON_TAG,
                       f"process {tags.get(PID_TAG)} on {host} was gone at the next stage start")
        client.set_terminated(run.info.run_id, "KILLED", end_time=_last_activity(client, run))
        dead.append(run.info.run_id)
    return dead


def _resumable(client: Any, experiment_id: str, run_id: str | None) -> Any:
    """The run `run_id` if it can be continued (in the store, in this experiment, not deleted)."""
    from mlflow.exceptions import MlflowException

    if not run_id:
        return None
    try:
        run = client.get_run(run_id)
    except MlflowException:
        log.warning("MLflow run %s (from the checkpoint) is not in the store; a new run gets the history", run_id)
        return None
    if run.info.experiment_id != experiment_id or run.info.lifecycle_stage != "active":
        log.warning("MLflow run %s (from the checkpoint) is %s in experiment %s; a new run gets the history",
                    run_id, run.info.lifecycle_stage, run.info.experiment_id)
        return None
    return run


def _log_params(mlf: Any, params: Mapping[str, Any], logged: Mapping[str, str]) -> None:
    """Log params; on a continued run, values that changed since (e.g. more steps) go to the
    tag `params_changed` instead, since MLflow keeps a run's params fixed."""
    flat = {k: str(v)[:6000] for k, v in flatten(params).items()}
    changed = [f"{k}: {logged[k]} -> {v}" for k, v in flat.items() if k in logged and logged[k] != v]
    items = [(k, v) for k, v in flat.items() if k not in logged]
    for i in range(0, len(items), 100):
        mlf.log_params(dict(items[i : i + 100]))
    if changed:
        mlf.set_tag("params_changed", "; ".join(changed)[:5000])


@contextlib.contextmanager
def stage_run(stage: str, profile: str, params: Mapping[str, Any] | None = None,
              tags: Mapping[str, str] | None = None, root: Path | None = None,
              resume_run_id: str | None = None, record: bool = True) -> Iterator[Any]:
    """The MLflow run of one stage, open for the whole `with` block; yields the mlflow module,
    so callers write `mlf.log_metric(...)` inside the block.

    A new run is named after the stage and carries params and the standard tags. With
    `resume_run_id` (the run a checkpoint was written under) that run is continued instead,
    its metrics kept, when the store still holds it. The run ends FINISHED, FAILED on an
    exception, or KILLED on SIGTERM or Ctrl-C; runs of this host whose process died without
    ending them are marked KILLED when any stage starts.

    With `root` given and `record` true, a run that ends FINISHED writes the stage's record,
    data/runs/<stage>.json under `root` (pipeline.tracking.stage_record): a DVC output of the
    stage naming the run that made its outputs.
    """
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(root)
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.set_experiment(ensure_experiment(profile, uri, artifact_root(root)))
    client = MlflowClient(tracking_uri=uri)
    mark_dead_runs(client, experiment.experiment_id)
    previous = _resumable(client, experiment.experiment_id, resume_run_id)
    with _sigterm_raises():
        if previous is not None:
            run_id = previous.info.run_id
            mlflow.start_run(run_id=run_id)
            attempt = int(previous.data.tags.get(ATTEMPT_TAG, "1")) + 1
            logged = previous.data.params
            if END_REASON_TAG in previous.data.tags:  # how the previous attempt ended, kept under its number
                client.set_tag(run_id, f"attempt_{attempt - 1}_end", previous.data.tags[END_REASON_TAG])
                client.delete_tag(run_id, END_REASON_TAG)
        else:
            threads = draw_tags(root or REPO_ROOT, profile)["draw.threads"]
            mlflow.start_run(run_name=f"{stage} [{threads} threads]" if other_threads(threads) else stage)
            attempt, logged = 1, {}
        try:
            pid = os.getpid()
            identity = {"git_commit": git_commit(root or REPO_ROOT), **draw_tags(root or REPO_ROOT, profile)}
            mlflow.set_tags({"stage": stage, "profile": profile, **identity, **(tags or {}),
                             ATTEMPT_TAG: str(attempt), HOST_TAG: socket.gethostname(), PID_TAG: str(pid),
                             PID_STARTED_TAG: process_started(pid)})
            if params:
                _log_params(mlflow, params, logged)
            yield mlflow
        except (StageTerminated, KeyboardInterrupt) as e:
            reason = "SIGTERM" if isinstance(e, StageTerminated) else "interrupted (SIGINT)"
            log.warning("stage %s: %s; its MLflow run %s ends KILLED", stage, reason, mlflow.active_run().info.run_id)
            mlflow.set_tag(END_REASON_TAG, reason)
            mlflow.end_run("KILLED")
            raise
        except BaseException as e:
            mlflow.set_tag(END_REASON_TAG, f"{type(e).__name__}: {e}"[:5000])
            mlflow.end_run("FAILED")
            raise
        else:
            run = mlflow.active_run()
            mlflow.end_run("FINISHED")
            if root is not None and record:
                write_record(root, StageRecord(
                    stage=stage, run_id=run.info.run_id, experiment_id=run.info.experiment_id,
                    experiment=experiment_name(profile), profile=profile, seed_set=identity["draw.seed_set"],
                    cpu=identity["draw.cpu"], precision=identity["draw.precision"], commit=identity["git_commit"],
                    code=code_version(), threads=str(_torch_threads()), threads_label=identity["draw.threads"]))


def _torch_threads() -> int | str:
    """torch's intra-op threads when the stage loaded torch; '' otherwise."""
    import sys

    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else ""


class CurveLogger:
    """A training curve for the active MLflow run, sent `every` steps in one batch instead
    of one synchronous call per step (~3 ms each on the SQLite store: seconds over a few
    thousand steps). Use as `log_fn(step, metrics)`; `flush()` (or leaving the `with`
    block) sends the rest. Keys are `<prefix>_<metric>`, or the metric's own name without a
    prefix.

    A resumable stage passes `every=None` and flushes after each checkpoint, so the store
    holds only points some checkpoint holds too: a resumed run re-logs no step. It then
    calls `restore(history)` with the checkpoint's history, which sends the points the run
    lacks (those of a process killed between its checkpoint and its flush, or all of them
    when the store lost the run)."""

    def __init__(self, mlf: Any, prefix: str = "", every: int | None = 100):
        from mlflow.entities import Metric

        if every is not None and every < 1:
            raise ValueError(f"every: expected >= 1 or None, got {every}")
        self._metric = Metric
        self._mlf, self._prefix, self._every = mlf, prefix, every
        self._pending: list[Any] = []
        self._steps = 0

    def _key(self, name: str) -> str:
        return f"{self._prefix}_{name}" if self._prefix else name

    def __call__(self, step: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        self._pending += [self._metric(self._key(k), float(v), now, step) for k, v in metrics.items()]
        self._steps += 1
        if self._every is not None and self._steps % self._every == 0:
            self.flush()

    def _run_id(self) -> str:
        run = self._mlf.active_run()
        if run is None:
            raise RuntimeError("CurveLogger: no active MLflow run to log the curve to")
        return run.info.run_id

    def _send(self, metrics: list[Any]) -> None:
        from mlflow.tracking import MlflowClient

        run_id, client = self._run_id(), MlflowClient()
        for start in range(0, len(metrics), 1000):  # MLflow's limit per batch
            client.log_batch(run_id, metrics=metrics[start : start + 1000])

    def flush(self) -> None:
        self._send(self._pending)
        self._pending = []

    def restore(self, history: list[Mapping[str, float]]) -> int:
        """Send the points of `history` ({"step": s, **metrics}) whose (key, step) the active
        run lacks; returns how many were sent."""
        from mlflow.tracking import MlflowClient

        run_id, client = self._run_id(), MlflowClient()
        now = int(time.time() * 1000)
        present: dict[str, set[int]] = {}
        missing = []
        for point in history:
            step = int(point["step"])
            for name, value in point.items():
                if name == "step":
                    continue
                key = self._key(name)
                if key not in present:
                    present[key] = {m.step for m in client.get_metric_history(run_id, key)}
                if step not in present[key]:
                    missing.append(self._metric(key, float(value), now, step))
                    present[key].add(step)
        self._send(missing)
        return len(missing)

    def __enter__(self) -> CurveLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.flush()
