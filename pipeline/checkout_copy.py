"""Copies of a checkout, and DVC run in them.

Draws (pipeline.draws.workspace), the Prefect flow's run roots and stage workspaces (flows.workspaces),
the end-to-end tests, benchmarks and dev studies all run `dvc` in a copy of the checkout's code:

    code_files          the files a copy holds: tracked and untracked-but-not-ignored, the state
                        (STATE: data, reports, DVC's own files, ...) left out except the profile's
                        kept draws, reports/<profile>/draws/ (an input of the report stage; DVC
                        refuses to run a stage whose dep is missing)
    code_fingerprint    a short hash of the code a copy holds (what a draw of uncommitted code is named by)
    mirror              a folder made to hold the checkout's code with a profile (params.yaml's `profile`
                        switched through pipeline.params_edit); its state (data, dvc.lock) stays
    copy_checkout       a fresh scratch copy: mirror, then `git init`
    write_local_config  .dvc/config.local: the checkout's DVC cache, its default remote (absolute)
    dvc_env             the environment of a copy's commands: the checkout's venv, MLflow store and commit
    run_streamed        a command whose output lines go, cleaned, to a callback as they are printed
    run_dvc             run_streamed for `dvc` (dvc_executable)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline.errors import InputError
from pipeline.io import write_text
from pipeline.params_edit import edit_file

REPO_ROOT = Path(__file__).resolve().parents[1]
STATE_DIR = ".maopd"  # git-ignored: draws' and Prefect's copies live under it
# Top-level paths of a checkout that are state, never code: not copied, never deleted from a copy.
STATE = ("data", "reports", ".dvc", STATE_DIR, "dvc.lock", "mlflow.db", "mlartifacts", ".git")
# Under .dvc/: the config, its .gitignore, the plot templates (dvc.yaml names them) and the offline
# page `make setup` writes (the config's plots.html_template), so `dvc plots show` works in a copy.
DVC_FILES = ("config", ".gitignore", "plots", "offline_plots.html")
# Telemetry off and the hub offline, as the Makefile exports them for `make repro`
QUIET_ENV = {"DVC_NO_ANALYTICS": "1", "MLFLOW_DISABLE_TELEMETRY": "true", "GX_ANALYTICS_ENABLED": "false",
             "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# Output read line by line (a log, not a terminal): unbuffered, no progress bars
STREAMED_ENV = {"PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}


# ---------------------------------------------------------------------------------------------
# the files


def kept_draws(profile: str) -> str:
    """The folder of a profile's kept draws, relative to a checkout (with a trailing '/')."""
    return f"reports/{profile}/draws/"


def code_files(checkout: Path, profile: str | None = None) -> list[str]:
    """The checkout's tracked and untracked-but-not-ignored files (relative, '/'-separated) that
    exist, the state (STATE) left out except `profile`'s kept draws (None: no kept draws)."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=checkout,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        raise InputError(f"{checkout}: cannot list its files, is it a git checkout? (git: {listed.stderr.strip()})")
    out = listed.stdout
    draws = kept_draws(profile) if profile is not None else None
    return [f for f in out.split("\0") if f and (f.split("/")[0] not in STATE or (draws and f.startswith(draws)))
            and (Path(checkout) / f).is_file()]


def dvc_files(checkout: Path) -> list[str]:
    """The files of the checkout's .dvc/ a copy takes (DVC_FILES), relative to the checkout."""
    dvc_dir = Path(checkout) / ".dvc"
    found = []
    for name in DVC_FILES:
        path = dvc_dir / name
        if path.is_file():
            found.append(f".dvc/{name}")
        elif path.is_dir():
            found += sorted(p.relative_to(checkout).as_posix() for p in path.rglob("*") if p.is_file())
    return found


def code_fingerprint(checkout: Path) -> str:
    """sha256 (12 hex digits) over the path and content of every code file (code_files, no kept
    draws): two checkouts running the same code have the same fingerprint."""
    digest = hashlib.sha256()
    for rel in sorted(code_files(checkout)):
        content = (Path(checkout) / rel).read_bytes()
        digest.update(f"{rel}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()[:12]


def same_file(src: Path, dst: Path) -> bool:
    """Size and modification time (copy2 keeps it), as rsync decides; reading both files
    for every stage of every run cost seconds."""
    if not dst.is_file():
        return False
    a, b = src.stat(), dst.stat()
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns


def _owned_roots(files: list[str], profile: str) -> set[str]:
    """The folders a copy takes from the checkout: each top-level code folder, and the profile's
    kept-draws folder (never the rest of reports/, whose outputs belong to the copy)."""
    draws = kept_draws(profile)
    return {draws.rstrip("/") if f.startswith(draws) else f.split("/")[0] for f in files}


def _remove_deleted(dest: Path, files: list[str], profile: str) -> None:
    """Files of `dest`'s code folders that the checkout no longer has."""
    keep = set(files)
    for top in _owned_roots(files, profile):
        path = dest / top
        if path.is_dir():
            for p in path.rglob("*"):
                if p.is_file() and p.relative_to(dest).as_posix() not in keep and "__pycache__" not in p.parts:
                    p.unlink()


def switch_profile(params: Path, profile: str) -> None:
    """params.yaml's `profile` set to `profile` (only that value rewritten)."""
    edit_file(params, {"profile": profile})


def mirror(checkout: Path, dest: Path, profile: str) -> list[str]:
    """Make `dest` hold the checkout's code (code_files; files deleted from the checkout leave
    it too) and DVC files (dvc_files), with params.yaml's profile `profile`; its state (data,
    dvc.lock, .dvc/config.local) stays. Unchanged files are not copied again. Returns the files."""
    checkout, dest = Path(checkout), Path(dest)
    files = code_files(checkout, profile)
    dest.mkdir(parents=True, exist_ok=True)
    _remove_deleted(dest, files, profile)
    for rel in (*files, *dvc_files(checkout)):
        src, dst = checkout / rel, dest / rel
        if not same_file(src, dst):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (dest / kept_draws(profile)).mkdir(parents=True, exist_ok=True)
    switch_profile(dest / "params.yaml", profile)
    return files


def copy_checkout(dest: Path, profile: str, root: Path = REPO_ROOT) -> Path:
    """A scratch copy of the checkout `root` at `dest` with profile `profile` (mirror), made a
    git repository of its own (DVC wants one): what draws, end-to-end tests and benchmarks run
    `dvc repro` in. No data, no dvc.lock, no report outputs."""
    dest = Path(dest)
    mirror(root, dest, profile)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


# ---------------------------------------------------------------------------------------------
# DVC's configuration of a copy


def _dvc_config(checkout: Path):
    from dvc.config import Config

    return Config(dvc_dir=str(Path(checkout).resolve() / ".dvc"))


def dvc_cache_dir(checkout: Path) -> Path:
    """The checkout's DVC cache (`dvc cache dir`): its config's cache.dir, else .dvc/cache."""
    configured = _dvc_config(checkout)["cache"].get("dir")
    return Path(configured) if configured else Path(checkout).resolve() / ".dvc" / "cache"


def default_remote(checkout: Path) -> tuple[str, str] | None:
    """The checkout's default DVC remote (name, URL), a local folder given relative to `.dvc/` made
    absolute (a copy elsewhere must point at the same folder); other URLs as they are."""
    config = _dvc_config(checkout)
    name = config["core"].get("remote")
    if not name:
        return None
    url = str(config["remote"][name]["url"])
    if "://" not in url and not os.path.isabs(url):
        url = str((Path(checkout) / ".dvc" / url).resolve())
    return name, url


def default_remote_url(checkout: Path) -> str | None:
    """The URL of default_remote, or None when the checkout has none."""
    remote = default_remote(checkout)
    return remote[1] if remote else None


def write_local_config(dest: Path, checkout: Path, share_cache: bool = True, no_scm: bool = False) -> None:
    """`dest`/.dvc/config.local for a copy of `checkout`: analytics off (no_scm: DVC without git),
    the checkout's DVC cache as the copy's (`share_cache`), so a stage some earlier run computed
    from the same inputs is restored rather than run, and the checkout's default remote, so a
    push or pull in the copy reaches the checkout's remote, never a folder inside the copy."""
    local = ["[core]", "    analytics = false"] + (["    no_scm = true"] if no_scm else [])
    if share_cache:
        local += ["[cache]", f"    dir = {dvc_cache_dir(checkout)}"]
    remote = default_remote(checkout)
    if remote is not None:
        local += [f"['remote \"{remote[0]}\"']", f"    url = {remote[1]}"]
    write_text(Path(dest) / ".dvc" / "config.local", "\n".join(local) + "\n")


# ---------------------------------------------------------------------------------------------
# running commands in a copy


def venv_bin(checkout: Path | None = None) -> Path:
    """The checkout's venv (`checkout`/.venv/bin) when it has one, else this interpreter's folder."""
    if checkout is not None:
        candidate = Path(checkout).resolve() / ".venv" / "bin"
        if (candidate / "python").exists():
            return candidate
    return Path(sys.executable).parent


def dvc_executable(checkout: Path | None = None) -> str:
    """`dvc` of venv_bin, else whichever `dvc` is on PATH."""
    candidate = venv_bin(checkout) / "dvc"
    return str(candidate) if candidate.exists() else "dvc"


def dvc_env(checkout: Path, commit: str, base: dict[str, str] | None = None,
            streamed: bool = False) -> dict[str, str]:
    """The environment of commands run in a copy of `checkout`: its venv first on PATH (the
    `python` of DVC's stage commands), its MLflow store and artifacts (unless
    MLFLOW_TRACKING_URI / MLFLOW_ARTIFACT_ROOT are set), runs tagged with `commit` (the copy is no
    git repo of the checkout's), telemetry off, and the profile params.yaml's (MAOPD_PROFILE and
    MAOPD_STAGE_READS dropped, so DVC tracks what the stages read). `streamed`: output that a log
    reads line by line (unbuffered, no progress bars)."""
    checkout = Path(checkout).resolve()
    env = dict(os.environ if base is None else base)
    for key, value in QUIET_ENV.items():
        env.setdefault(key, value)
    env.update({
        "PATH": f"{venv_bin(checkout)}{os.pathsep}{env.get('PATH', '')}",
        "MLFLOW_TRACKING_URI": env.get("MLFLOW_TRACKING_URI") or f"sqlite:///{checkout / 'mlflow.db'}",
        "MLFLOW_ARTIFACT_ROOT": env.get("MLFLOW_ARTIFACT_ROOT") or (checkout / "mlartifacts").as_uri(),
        "MAOPD_GIT_COMMIT": commit,
        **(STREAMED_ENV if streamed else {}),
    })
    env.pop("MAOPD_PROFILE", None)
    env.pop("MAOPD_STAGE_READS", None)
    return env


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# DVC's advice to a person at a terminal; a flow pushes and commits the lock itself.
_HINTS = re.compile(r"^(Use `dvc push` to send your updates to remote storage\.|To track the changes with git, run:|"
                    r"To enable auto staging, run:|\s*(git add |dvc config core\.autostage true).*)$")


def clean_line(raw: str) -> str | None:
    """What a log shows of one output line: the last state of a line redrawn with `\\r`
    (progress bars), without ANSI colour codes; None for blank lines and DVC's hints."""
    segments = [seg for seg in _ANSI.sub("", raw.rstrip("\n")).split("\r") if seg.strip()]
    text = segments[-1].rstrip() if segments else ""
    if not text.strip() or _HINTS.match(text):
        return None
    return text


def run_streamed(args: list[str], cwd: Path, env: dict[str, str],
                 on_line: Callable[[str], None] | None = None) -> tuple[int, str]:
    """Run `args` in `cwd`; each cleaned output line (stdout and stderr) goes to `on_line` as it
    is printed. Returns the exit code and the whole (cleaned) output."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    lines = []
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = clean_line(raw)
        if line is None:
            continue
        lines.append(line)
        if on_line is not None:
            on_line(line)
    return proc.wait(), "\n".join(lines)


def run_dvc(args: list[str], cwd: Path, env: dict[str, str], on_line: Callable[[str], None] | None = None,
            checkout: Path | None = None) -> tuple[int, str]:
    """run_streamed of `dvc ARGS` (dvc_executable of `checkout`)."""
    return run_streamed([dvc_executable(checkout), *args], cwd, env, on_line)
