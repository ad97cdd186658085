"""Where each stage of a flow run executes, and how its results reach the run's checkout.

A flow run owns a *run root*: the checkout itself, or for another profile a copy of it under
`.maopd/profiles/<profile>/` whose params.yaml selects that profile. Every stage runs in its
own *workspace* (`.maopd/work/<profile>/<stage>/`: the code, the run root's dvc.lock and the
stage's data), so independent stages run at the same time without fighting over DVC's lock.
All copies share the checkout's DVC cache; data moves between them, and between machines,
through the DVC remote:

    pull (upstream outputs, and the stage's own)  ->  dvc repro -s  ->  push  ->  sync back

Syncing back merges the stage's dvc.lock entry into the run root and checks its outputs out
there, so `dvc status` in the run root is clean once the flow ends.

Copying the code, the environment of `dvc`, running it and the copies' DVC config are
pipeline.checkout_copy's, shared with draws; this module lays out and drives the flow's copies.
No Prefect here: these are plain functions the flow's tasks call.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline import checkout_copy
from pipeline.checkout_copy import STATE_DIR, default_remote_url, dvc_env, dvc_executable, run_dvc
from pipeline.io import write_text as atomic_write_text

_sync_lock = threading.Lock()


class StageFailed(RuntimeError):
    """`dvc` failed for a stage; `transient` says whether running it again may succeed."""

    def __init__(self, message: str, transient: bool):
        super().__init__(message)
        self.transient = transient


# Failures worth a retry: another DVC process held a lock, the remote was unreachable, the
# process was killed (OOM killer, preempted worker). A stage's own error is not retried.
_TRANSIENT = re.compile(
    r"Unable to acquire lock|Connection (reset|refused|aborted)|timed out|Temporary failure|"
    r"failed to (push|pull|fetch)|remote .* (unreachable|not available)",
    re.IGNORECASE,
)


def is_transient(returncode: int, output: str) -> bool:
    return returncode < 0 or returncode in (137, 143) or bool(_TRANSIENT.search(output))


def repro_status(output: str, stage: str) -> str:
    """What `dvc repro -s <stage>` did: `skipped` (up to date), `restored` (from the run
    cache) or `ran`."""
    quoted = re.escape(f"'{stage}'")
    if re.search(rf"Stage {quoted} didn't change, skipping", output):
        return "skipped"
    if re.search(rf"Stage {quoted} is cached - skipping run", output):
        return "restored"
    return "ran"


def stage_env(layout: RunLayout) -> dict[str, str]:
    """The environment of every `dvc` call (pipeline.checkout_copy.dvc_env): stage commands call
    the checkout's `python`, track into the checkout's MLflow store, tag runs with the checkout's
    commit, flush their output line by line and draw no progress bars (the lines go to Prefect's log)."""
    return dvc_env(layout.checkout, layout.commit, streamed=True)


@dataclass(frozen=True)
class RunLayout:
    checkout: Path  # the git checkout the flow's code comes from
    profile: str

    @classmethod
    def for_profile(cls, checkout: Path, profile: str | None) -> RunLayout:
        checkout = Path(checkout).resolve()
        return cls(checkout, profile or checkout_profile(checkout))

    @property
    def root(self) -> Path:
        if self.profile == checkout_profile(self.checkout):
            return self.checkout
        return self.checkout / STATE_DIR / "profiles" / self.profile

    def workspace(self, stage: str) -> Path:
        return self.checkout / STATE_DIR / "work" / self.profile / stage.replace("@", "--")

    @property
    def commit(self) -> str:
        from pipeline.provenance import git_commit

        return git_commit(self.checkout)


def checkout_profile(checkout: Path) -> str:
    return str(yaml.safe_load((checkout / "params.yaml").read_text())["profile"])


def mirror(layout: RunLayout, dest: Path) -> None:
    """Make `dest` a copy of the checkout's code with the layout's profile; keep its state
    (data, dvc.lock); point its DVC cache and remote at the checkout's (pipeline.checkout_copy)."""
    checkout_copy.mirror(layout.checkout, dest, layout.profile)
    checkout_copy.write_local_config(dest, layout.checkout, share_cache=True, no_scm=True)


def prepare_root(layout: RunLayout) -> Path:
    """The run root, created (another profile) or refreshed from the checkout's code."""
    if layout.root != layout.checkout:
        mirror(layout, layout.root)
    return layout.root


def prepare_workspace(layout: RunLayout, stage: str, upstream: list[str] | None = None) -> Path:
    """The stage's workspace with the run root's code, and its dvc.lock holding only the
    entries of `stage` and its `upstream` stages (None: every entry). DVC parses the lock
    once per target it is given, so a lock of the whole DAG made pulling slow."""
    ws = layout.workspace(stage)
    mirror(layout, ws)
    lock = layout.root / "dvc.lock"
    if lock.exists():
        text = lock.read_text()
        if upstream is not None:
            data = yaml.safe_load(text) or {}
            keep = {stage, *upstream}
            data["stages"] = {k: v for k, v in (data.get("stages") or {}).items() if k in keep}
            text = yaml.safe_dump(data, sort_keys=False)
        atomic_write_text(ws / "dvc.lock", text)
    return ws


@dataclass
class StageOutcome:
    stage: str
    status: str  # ran | skipped | restored
    workspace: str
    log_tail: list[str]
    seconds: dict[str, float] = field(default_factory=dict)  # per phase: workspace, pull, repro, push, sync

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "status": self.status, "workspace": self.workspace,
                "seconds": {k: round(v, 2) for k, v in self.seconds.items()}}

    @property
    def overhead(self) -> float:
        """Seconds spent around `dvc repro`: the workspace, pull, push and sync back."""
        return sum(v for k, v in self.seconds.items() if k != "repro")


def _check(code: int, output: str, what: str) -> None:
    if code != 0:
        raise StageFailed(f"{what} failed (exit {code}):\n{_tail(output, 30)}", is_transient(code, output))


def _tail(output: str, n: int) -> str:
    return "\n".join(output.splitlines()[-n:])


class _Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str) -> _Phase:
        return _Phase(self, phase)


class _Phase:
    def __init__(self, clock: _Clock, phase: str):
        self.clock, self.phase = clock, phase

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.clock.seconds[self.phase] = self.clock.seconds.get(self.phase, 0.0) + time.perf_counter() - self.start


def stale_stages(layout: RunLayout) -> set[str] | None:
    """The stages `dvc status` finds changed in the run root (deps, params, or outputs that
    differ or are missing); None when it cannot tell. One DVC call for the whole DAG."""
    proc = subprocess.run([dvc_executable(layout.checkout), "status", "--json"], cwd=layout.root, env=stage_env(layout),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    try:
        changed = json.loads(proc.stdout or "{}")
    except ValueError:
        return None
    return {name.split(":")[-1] for name in changed}


def up_to_date(graph: dict[str, list[str]], stale: set[str] | None) -> set[str]:
    """Stages DVC would skip without running anything upstream: clean themselves, and every
    stage they depend on (transitively) clean too, so no upstream run can change their inputs."""
    if stale is None:
        return set()
    clean: set[str] = set()
    for stage in graph:  # topological order
        if stage not in stale and all(d in clean for d in graph[stage]):
            clean.add(stage)
    return clean


def run_stage(layout: RunLayout, stage: str, upstream: list[str], push: bool = True,
              on_line: Callable[[str], None] | None = None, uncached: list[str] | None = None) -> StageOutcome:
    """Pull what `stage` needs, reproduce it alone in its workspace, push what it produced, and
    merge the result into the run root. DVC's output goes to `on_line` as it is printed.
    `uncached`: the stage's `cache: false` outputs, when the caller knows them."""
    env = stage_env(layout)
    clock = _Clock()
    with clock("workspace"):
        ws = prepare_workspace(layout, stage, upstream)
    with clock("pull"):
        # --allow-missing: a stage never run anywhere has nothing to pull yet
        code, out = run_dvc(["pull", "--allow-missing", *upstream, stage], ws, env, checkout=layout.checkout)
        if code != 0 and upstream:
            _check(code, out, f"dvc pull {' '.join(upstream)} (inputs of {stage})")
    with clock("repro"):
        code, repro_out = run_dvc(["repro", "--single-item", stage], ws, env, on_line, layout.checkout)
        _check(code, repro_out, f"dvc repro --single-item {stage}")
    status = repro_status(repro_out, stage)
    if push and status != "skipped" and default_remote_url(layout.checkout):  # skipped: pulled, so on the remote
        with clock("push"):
            code, out = run_dvc(["push", stage], ws, env, checkout=layout.checkout)
            _check(code, out, f"dvc push {stage}")
    with clock("sync"):
        sync_back(layout, ws, stage, uncached)
    return StageOutcome(stage, status, str(ws), repro_out.splitlines()[-40:], clock.seconds)


def stage_lock_entry(lock_path: Path, stage: str) -> dict:
    lock = yaml.safe_load(lock_path.read_text()) or {}
    try:
        return lock["stages"][stage]
    except KeyError:
        raise StageFailed(f"{lock_path}: no entry for stage {stage!r} after dvc repro", transient=False) from None


def merge_lock_entry(lock_path: Path, stage: str, entry: dict) -> None:
    lock = yaml.safe_load(lock_path.read_text()) if lock_path.exists() else None
    lock = lock or {"schema": "2.0", "stages": {}}
    lock.setdefault("stages", {})[stage] = entry
    atomic_write_text(lock_path, yaml.safe_dump(lock, sort_keys=False))


def _uncached_outs(ws: Path, stage: str) -> list[str]:
    from dvc.repo import Repo

    with Repo(str(ws)) as repo:  # (repo.stage.collect would resolve a bare name from the cwd)
        for resolved in repo.index.stages:
            if resolved.addressing.split(":")[-1] == stage:
                return [out.def_path for out in resolved.outs if not out.use_cache]
    raise StageFailed(f"{ws / 'dvc.yaml'}: no stage {stage!r}", transient=False)


def sync_back(layout: RunLayout, ws: Path, stage: str, uncached: list[str] | None = None) -> None:
    """The stage's lock entry and outputs from its workspace into the run root (one at a time:
    tasks of a flow run share the run root)."""
    root = layout.root
    entry = stage_lock_entry(ws / "dvc.lock", stage)
    with _sync_lock, _file_lock(root / ".dvc" / "tmp" / "maopd-sync.lock"):
        merge_lock_entry(root / "dvc.lock", stage, entry)
        code, out = run_dvc(["checkout", "--force", stage], root, stage_env(layout), checkout=layout.checkout)
        _check(code, out, f"dvc checkout {stage} (run root {root})")
        for rel in (uncached if uncached is not None else _uncached_outs(ws, stage)):
            _replace(ws / rel, root / rel)  # after the checkout, which removes what it cannot restore


def _replace(src: Path, dst: Path) -> None:
    if not src.exists():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.sync-tmp")
    shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
    (shutil.copytree if src.is_dir() else shutil.copy2)(src, tmp)
    if dst.is_dir():
        shutil.rmtree(dst)
    os.replace(tmp, dst)


class _file_lock:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "w")
        fcntl.flock(self.fh, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
