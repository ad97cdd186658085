"""Open what a user opens, in a real browser, and fail on a blank page or a console error.

    .venv/bin/python scripts/browser_check.py [--checkout DIR] [--profile tiny] [--screenshots DIR]
    make browser-check

Needs Debian's Chromium (`apt-get install -y chromium`, driven by Playwright) and a checkout
where the profile's DAG has run (`make repro`, or a Prefect run: another profile than the
checkout's lives in `.maopd/profiles/<profile>/`). `--checkout` defaults to this one. The pages:

1. the report, `reports/<profile>/paper.html` (every figure must load);
2. the `dvc plots show` page (every plot must draw; nothing may load from the network);
3. the MLflow experiment page: an `mlflow server` on a free port over the checkout's store
   (the runs table must show, in the model-training view);
4. a Prefect flow-run page: a temporary Prefect server, the deployments, a `cpu` worker, and
   a run of `maopd-paper/smoke` on the checkout's profile for `--prefect-stages` (default:
   the report, which is up to date after `make repro`, so the run takes seconds).

Every process it starts leads its own process group and is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
QUIET = {"DVC_NO_ANALYTICS": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
         "GX_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
MIN_TEXT = 200  # characters of visible text below which a page counts as blank
# Failed requests a page makes by design, with the reason; each excuses one "Failed to load
# resource" console error of the same status. Nothing else is excused.
EXPECTED_FAILURES = [
    (404, re.compile(r"/ajax-api/2\.0/mlflow/users/current$"),
     "MLflow's UI asks who is logged in; a server without its auth app answers 404"),
    (404, re.compile(r"/ico/undefined\.svg$"),
     "Prefect's UI sets the favicon to the run state's icon before the state has loaded"),
    (404, re.compile(r"^http://127\.0\.0\.1:\d+/favicon\.ico$"),
     "the browser falls back to /favicon.ico after that broken icon; Prefect serves its icons under /ico/"),
]


@dataclass
class PageResult:
    name: str
    url: str
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float, what: str) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"browser check: {what} did not answer on {url} within {timeout_s:.0f} s")


@contextlib.contextmanager
def background(cmd: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """A process in its own process group, stopped (TERM, then KILL) with its children."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def base_env() -> dict[str, str]:
    return {**os.environ, **QUIET, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}


def expected_failure(status: int, url: str) -> str | None:
    return next((why for code, pattern, why in EXPECTED_FAILURES if code == status and pattern.search(url)), None)


def on_console(result: PageResult, message) -> None:
    """A console error fails the page, unless it is an expected failed request (matched by
    the resource URL the browser reports with it)."""
    if message.type != "error":
        return
    url = (message.location or {}).get("url", "")
    status = re.search(r"status of (\d+)", message.text)
    reason = expected_failure(int(status.group(1)), url) if status else None
    if reason is None:
        result.errors.append(f"console.error: {message.text} ({url})")
    else:
        result.notes.append(f"expected: {message.text} for {url} ({reason})")


def check_page(browser, result: PageResult, ready_js: str, timeout_s: float, shots: Path | None,
               offline: bool = False) -> PageResult:
    """Load the page, wait until `ready_js` is true, then collect console errors, uncaught
    exceptions, failed requests and (offline) any request that left the machine."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("console", lambda m: on_console(result, m))
    page.on("pageerror", lambda e: result.errors.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: result.errors.append(f"request failed: {r.url} ({r.failure})"))
    failed: list[tuple[int, str]] = []
    page.on("response", lambda r: failed.append((r.status, r.url)) if r.status >= 400 else None)
    if offline:
        page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "blob:", "about:"))
                else result.errors.append(f"network request from an offline page: {r.url}"))
    page.goto(result.url, wait_until="load", timeout=timeout_s * 1000)
    try:
        page.wait_for_function(ready_js, timeout=timeout_s * 1000)
    except Exception:
        result.errors.append(f"not ready within {timeout_s:.0f} s: {ready_js}")
    page.wait_for_timeout(1000)  # late errors (lazy requests, rendering)
    for status, url in failed:
        if expected_failure(status, url) is None:
            result.errors.append(f"HTTP {status}: {url}")
    text = page.evaluate("document.body ? document.body.innerText.trim().length : 0")
    if text < MIN_TEXT:
        result.errors.append(f"blank page: {text} characters of text")
    result.notes.append(f"{text} characters of text; final URL {page.url}")
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / f"{result.name}.png"), full_page=True)
    page.close()
    return result


def report_page(browser, root: Path, profile: str, shots: Path | None) -> PageResult:
    path = root / "reports" / profile / "paper.html"
    if not path.is_file():
        return PageResult("report", str(path), [f"{path} does not exist: run `make repro` first"])
    result = check_page(browser, PageResult("report", path.as_uri()),
                        "document.readyState === 'complete' && [...document.images].length > 0", 30, shots,
                        offline=True)
    page = browser.new_page()
    page.goto(result.url)
    broken = page.evaluate("[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt)")
    images = page.evaluate("document.images.length")
    page.close()
    if broken:
        result.errors.append(f"broken images: {broken}")
    result.notes.append(f"{images} figures, all loaded" if not broken else f"{images} figures")
    return result


def plots_page(browser, root: Path, shots: Path | None, work: Path) -> PageResult:
    out = work / "dvc_plots"
    proc = subprocess.run([str(BIN / "dvc"), "plots", "show", "-o", str(out)], cwd=root, env=base_env(),
                          capture_output=True, text=True)
    result = PageResult("dvc-plots", (out / "index.html").as_uri())
    if proc.returncode != 0 or "failed to load" in (proc.stdout + proc.stderr).lower():
        result.errors.append(f"dvc plots show: {(proc.stdout + proc.stderr).strip()[-500:]}")
        return result
    expected = (out / "index.html").read_text().count("vegaEmbed('#")
    if expected == 0:
        result.errors.append("the page holds no plot")
        return result
    ready = f"document.querySelectorAll('.vega-embed svg.marks, .vega-embed canvas.marks').length >= {expected}"
    check_page(browser, result, ready, 60, shots, offline=True)
    result.notes.append(f"{expected} plots on the page")
    return result


def mlflow_page(browser, checkout: Path, profile: str, shots: Path | None, work: Path) -> PageResult:
    from mlflow.tracking import MlflowClient

    from pipeline.mlflow_ui import experiment_url
    from pipeline.tracking import experiment_name

    store = checkout / "mlflow.db"
    experiment = MlflowClient(f"sqlite:///{store}").get_experiment_by_name(experiment_name(profile))
    if experiment is None:
        return PageResult("mlflow", str(store), [f"no experiment {experiment_name(profile)} in {store}"])
    port = free_port()
    env = {**base_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--backend-store-uri", f"sqlite:///{store}", "--default-artifact-root", str(checkout / "mlartifacts")]
    with background(cmd, env, work / "mlflow.log"):
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health", 120, "mlflow server")
        # the link the README, the report and Prefect hand out (pipeline.mlflow_ui)
        os.environ["MLFLOW_UI_URL"] = base
        result = PageResult("mlflow", experiment_url(experiment.experiment_id))
        ready = "document.body && /evaluate@|report|teacher/.test(document.body.innerText)"
        check_page(browser, result, ready, 90, shots)
        if "workflowType=machine_learning" not in result.notes[-1]:
            result.errors.append("the experiment did not open in the model-training view")
    return result


def prefect_page(browser, checkout: Path, profile: str, stages: list[str], shots: Path | None,
                 work: Path) -> PageResult:
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**base_env(), "PREFECT_HOME": str(work / "prefect"), "PREFECT_API_URL": api,
           "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_LEVEL": "INFO"}
    with contextlib.ExitStack() as stack:
        stack.enter_context(background([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                                        "--port", str(port)], env, work / "prefect-server.log"))
        wait_http(f"{api}/health", 180, "prefect server")
        subprocess.run([sys.executable, "-m", "flows.deploy", "--worker-starting", "cpu"], cwd=ROOT, env=env,
                       check=True, capture_output=True)
        stack.enter_context(background([str(BIN / "prefect"), "worker", "start", "--pool", "cpu"], env,
                                       work / "prefect-worker.log"))
        run = subprocess.run([str(BIN / "prefect"), "deployment", "run", "maopd-paper/smoke", "-p",
                              f"profile={profile}", "-p", f"stages={json.dumps(stages)}", "-p",
                              f"checkout={checkout}", "--watch",
                              "--watch-timeout", "900"], cwd=ROOT, env=env, capture_output=True, text=True)
        found = re.search(r"UUID: ([0-9a-f-]{36})", run.stdout)
        if not found:
            return PageResult("prefect", api, [f"no flow run started: {(run.stdout + run.stderr)[-800:]}"])
        result = PageResult("prefect", f"http://127.0.0.1:{port}/runs/flow-run/{found.group(1)}")
        if run.returncode != 0:
            result.errors.append(f"the flow run did not complete: {(run.stdout + run.stderr)[-800:]}")
        ready = "document.body && " + " && ".join(f"document.body.innerText.includes({json.dumps(s)})"
                                                  for s in [*stages[:1], "Completed"])
        check_page(browser, result, ready, 90, shots)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", type=Path, default=ROOT, help="the checkout to look at (default: this one)")
    ap.add_argument("--profile", default=None, help="default: the checkout's params.yaml")
    ap.add_argument("--prefect-stages", nargs="+", default=["report"])
    ap.add_argument("--screenshots", type=Path, default=None, help="save a full-page screenshot of each page here")
    ap.add_argument("--only", nargs="+", choices=["report", "plots", "mlflow", "prefect"], default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.update(QUIET)
    from playwright.sync_api import sync_playwright

    from flows.workspaces import RunLayout

    checkout = args.checkout.resolve()
    layout = RunLayout.for_profile(checkout, args.profile)
    profile, root = layout.profile, layout.root
    if not Path(CHROMIUM).exists():
        print(f"browser check: {CHROMIUM} not found; install it: apt-get install -y chromium", file=sys.stderr)
        return 2
    wanted = args.only or ["report", "plots", "mlflow", "prefect"]
    results = []
    with tempfile.TemporaryDirectory(prefix="browser_check.") as tmp, sync_playwright() as pw:
        work = Path(tmp)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run", "--disable-dev-shm-usage"])
        checks = {"report": lambda: report_page(browser, root, profile, args.screenshots),
                  "plots": lambda: plots_page(browser, root, args.screenshots, work),
                  "mlflow": lambda: mlflow_page(browser, checkout, profile, args.screenshots, work),
                  "prefect": lambda: prefect_page(browser, checkout, profile, args.prefect_stages, args.screenshots,
                                                  work)}
        for name in wanted:
            started = time.perf_counter()
            result = checks[name]()
            status = "PASS" if result.ok else "FAIL"
            print(f"{status} {result.name:9s} {result.url}  ({time.perf_counter() - started:.0f} s)")
            for note in result.notes:
                print(f"       {note}")
            for error in result.errors:
                print(f"       error: {error}")
            results.append(result)
        browser.close()
    failed = [r.name for r in results if not r.ok]
    print(f"browser check: {len(results) - len(failed)} of {len(results)} pages pass"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
