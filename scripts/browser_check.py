"""Open what a user opens, in a real browser with the network blocked, follow every MLflow link,
and fail on a blank page, a console error, a dead link or a request that leaves the machine.

    .venv/bin/python scripts/browser_check.py [--checkout DIR] [--profile tiny] [--screenshots DIR]
    make browser-check

Needs Debian's Chromium (`apt-get install -y chromium`, driven by Playwright) and a checkout
where the profile's DAG has run (`make repro`, or a Prefect run: another profile than the
checkout's lives in `.maopd/profiles/<profile>/`). `--checkout` defaults to this one.

Every page runs in a browser context that lets through only file:, data:, blob:, about: and
http://127.0.0.1 / localhost requests; any other request is aborted and fails the page. The
pages:

1. the report, `reports/<profile>/paper.html`: every figure loads; its MLflow links are
   collected;
2. the `dvc plots show` page: every plot draws, each under a title that says what it shows
   (not a CSV path);
3. the Great Expectations Data Docs: each index (`reports/<profile>/data_docs/*/index.html`)
   lists at least one validation, each with a pass/fail mark, and every validation page it
   links shows its marks;
4. MLflow: `mlflow server --app-name maopd` (the server of `make mlflow-ui`, on a free port)
   over the checkout's store: the experiment opens in the model-training view, and every MLflow
   link of the report opens what it names by id: the page of that very run (showing its name),
   or a file among that run's artifacts (a 404 or MLflow's "Page Not Found" fails);
5. Prefect: a temporary server, the deployments, a `cpu` worker and a run of
   `maopd-paper/smoke` on the checkout's profile for `--prefect-stages` (default: the report,
   up to date after `make repro`, so the run takes seconds). The flow-run page shows the run;
   the summary artifact's tables fit the page; every link of the summary and of the tasks' link
   artifacts opens (MLflow runs, the report and the Data Docs served by MLflow); the `paper`
   deployment says that its schedule is paused.

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
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
QUIET = {"DVC_NO_ANALYTICS": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
         "GX_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
MIN_TEXT = 200  # characters of visible text below which a page counts as blank
VIEWPORT = {"width": 1400, "height": 1000}
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome-error:")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
NOT_FOUND = re.compile(r"page not found|404 not found|^not found$", re.I | re.M)
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


@dataclass
class Session:
    """What the checks share: the browser, where screenshots go, a scratch folder, and the MLflow
    server once it runs (its base URL, the links still to follow)."""

    browser: object
    shots: Path | None
    work: Path
    mlflow_base: str | None = None
    mlflow_links: list[tuple[str, str]] = field(default_factory=list)  # (where found, URL)


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
def background(cmd: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT) -> Iterator[subprocess.Popen]:
    """A process in its own process group, stopped (TERM, then KILL) with its children."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
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


def is_local(url: str) -> bool:
    if url.startswith(LOCAL_SCHEMES):
        return True
    parts = urlsplit(url)
    return parts.scheme in ("http", "https", "ws") and parts.hostname in ("127.0.0.1", "localhost", "::1")


def on_console(result: PageResult, message) -> None:
    """A console error fails the page, unless it is an expected failed request (matched by
    the resource URL the browser reports with it) or the browser's own report of a request
    this check blocked (counted as a blocked request already)."""
    if message.type != "error":
        return
    url = (message.location or {}).get("url", "")
    status = re.search(r"status of (\d+)", message.text)
    reason = expected_failure(int(status.group(1)), url) if status else None
    if "net::ERR_FAILED" in message.text or "ERR_BLOCKED" in message.text:
        return
    if reason is None:
        result.errors.append(f"console.error: {message.text} ({url})")
    else:
        result.notes.append(f"expected: {message.text} for {url} ({reason})")


def new_page(session: Session, result: PageResult, width: int = VIEWPORT["width"], height: int = VIEWPORT["height"]):
    """A page in a context of its own that blocks the network: every request not to this
    machine is aborted and fails `result`."""
    context = session.browser.new_context(viewport={"width": width, "height": height})

    def route(r) -> None:
        if is_local(r.request.url):
            r.continue_()
        else:
            result.errors.append(f"network request blocked: {r.request.url}")
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: on_console(result, m))
    page.on("pageerror", lambda e: result.errors.append(f"uncaught: {e}"))
    return page


def check_page(session: Session, result: PageResult, ready_js: str, timeout_s: float, shot: str | None = None,
               width: int = VIEWPORT["width"], keep: bool = False, height: int = VIEWPORT["height"]):
    """Load the page, wait until `ready_js` is true, then collect console errors, uncaught
    exceptions, failed requests and requests that left the machine. Returns the open page
    when `keep` (the caller closes its context), else None."""
    page = new_page(session, result, width, height)
    failed: list[tuple[int, str]] = []
    page.on("response", lambda r: failed.append((r.status, r.url)) if r.status >= 400 else None)
    page.on("requestfailed", lambda r: None if not is_local(r.url)
            else result.errors.append(f"request failed: {r.url} ({r.failure})"))
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
    if session.shots is not None and shot:
        session.shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(session.shots / f"{shot}.png"), full_page=True)
    if keep:
        return page
    page.context.close()
    return None


def mlflow_links_of(page, where: str, ui_url: str) -> list[tuple[str, str]]:
    hrefs = page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)")
    return [(where, h) for h in dict.fromkeys(hrefs) if h.startswith(ui_url)]


def report_page(session: Session, root: Path, profile: str) -> PageResult:
    from pipeline.tracking.links import ui_url

    path = root / "reports" / profile / "paper.html"
    if not path.is_file():
        return PageResult("report", str(path), [f"{path} does not exist: run `make repro` first"])
    result = PageResult("report", path.as_uri())
    page = check_page(session, result, "document.readyState === 'complete' && [...document.images].length > 0",
                      30, "report", keep=True)
    broken = page.evaluate("[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt)")
    images = page.evaluate("document.images.length")
    # a figure wider than it is shown is scaled down, and its text with it
    scaled = page.evaluate("[...document.images].filter(i => i.naturalWidth > i.clientWidth + 1)"
                           ".map(i => `${i.alt}: ${i.naturalWidth} px shown at ${i.clientWidth}`)")
    links = mlflow_links_of(page, "report", ui_url())
    page.context.close()
    if broken:
        result.errors.append(f"broken images: {broken}")
    if scaled:
        result.errors.append(f"figures scaled down (their text shrinks below its size): {scaled}")
    if not links:
        result.errors.append("the report holds no MLflow link")
    session.mlflow_links += links
    result.notes.append(f"{images} figures, {len(links)} MLflow links (followed by the mlflow check)")
    return result


def plots_page(session: Session, root: Path) -> PageResult:
    out = session.work / "dvc_plots"
    proc = subprocess.run([str(BIN / "dvc"), "plots", "show", "-o", str(out)], cwd=root, env=base_env(),
                          capture_output=True, text=True)
    result = PageResult("dvc-plots", (out / "index.html").as_uri())
    if proc.returncode != 0 or "failed to load" in (proc.stdout + proc.stderr).lower():
        result.errors.append(f"dvc plots show: {(proc.stdout + proc.stderr).strip()[-500:]}")
        return result
    html_text = (out / "index.html").read_text()
    expected = html_text.count("vegaEmbed('#")
    if expected == 0:
        result.errors.append("the page holds no plot")
        return result
    ready = f"document.querySelectorAll('.vega-embed svg.marks, .vega-embed canvas.marks').length >= {expected}"
    page = check_page(session, result, ready, 60, "dvc-plots", keep=True)
    titles = page.evaluate("[...document.querySelectorAll('.vega-embed svg .role-title-text')]"
                           ".map(t => t.textContent)")
    page.context.close()
    raw = [t for t in titles if t.endswith(".csv") or "/" in t]
    if len(titles) < expected:
        result.errors.append(f"{expected - len(titles)} plots without a title")
    if raw:
        result.errors.append(f"plots titled with a file path, not what they show: {raw}")
    result.notes.append(f"{expected} plots on the page, titled: {'; '.join(titles)}")
    return result


def data_docs_pages(session: Session, root: Path, profile: str) -> list[PageResult]:
    indexes = sorted((root / "reports" / profile / "data_docs").glob("*/index.html"))
    if not indexes:
        return [PageResult("data-docs", str(root / "reports" / profile / "data_docs"),
                           ["no Data Docs index: run `make repro` first"])]
    results = []
    for index in indexes:
        name = index.parent.name
        result = PageResult(f"data-docs-{name}", index.as_uri())
        page = check_page(session, result, "document.readyState === 'complete'", 30, f"data-docs-{name}",
                          keep=True)
        rows = page.evaluate("[...document.querySelectorAll('table.maopd-validations tbody tr')].map(r => "
                             "({mark: (r.querySelector('.maopd-mark') || {}).textContent || '', "
                             "href: (r.querySelector('a') || {}).href || ''}))")
        page.context.close()
        if not rows:
            result.errors.append("empty index: no validation listed")
        unmarked = [r["href"] for r in rows if not r["mark"].strip()]
        if unmarked:
            result.errors.append(f"validations without a pass/fail mark: {unmarked}")
        result.notes.append(f"{len(rows)} validations: " + ", ".join(r["mark"].strip() for r in rows))
        results.append(result)
        for i, row in enumerate(r for r in rows if r["href"]):
            sub = PageResult(f"data-docs-{name}-{i}", row["href"])
            page = check_page(session, sub, "document.readyState === 'complete'", 30,
                              f"data-docs-{name}-validation-{i}", keep=True)
            marks = page.evaluate("document.querySelectorAll('.maopd-mark').length")
            note = page.evaluate("document.body.innerText.includes('is a constant')")
            page.context.close()
            if not marks:
                sub.errors.append("no pass/fail mark on the validation page")
            if not note:
                sub.errors.append("the page does not say why its run time is a constant")
            sub.notes.append(f"{marks} pass/fail marks")
            results.append(sub)
    return results


@contextlib.contextmanager
def mlflow_server(session: Session, checkout: Path) -> Iterator[str]:
    """`mlflow server --app-name maopd` on a free port over the checkout's store; MLFLOW_UI_URL
    points at it meanwhile, so links built here (and by the Prefect flow) use it."""
    port = free_port()
    env = {**base_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [str(BIN / "mlflow"), "server", "--app-name", "maopd", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--backend-store-uri", f"sqlite:///{checkout / 'mlflow.db'}",
           "--default-artifact-root", str(checkout / "mlartifacts")]
    with background(cmd, env, session.work / "mlflow.log"):
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health", 120, "mlflow server")
        previous = os.environ.get("MLFLOW_UI_URL")
        os.environ["MLFLOW_UI_URL"] = base
        session.mlflow_base = base
        try:
            yield base
        finally:
            session.mlflow_base = None
            if previous is None:
                os.environ.pop("MLFLOW_UI_URL", None)
            else:
                os.environ["MLFLOW_UI_URL"] = previous


def run_name(session: Session, run_id: str) -> str | None:
    """The name of run `run_id`, from the MLflow server's REST API; None when it has no such run."""
    url = f"{session.mlflow_base}/api/2.0/mlflow/runs/get?run_id={urllib.request.quote(run_id)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return json.load(answer)["run"]["info"]["run_name"]
    except (OSError, ValueError, KeyError):
        return None


def follow_link(session: Session, where: str, url: str, shot: str | None = None) -> PageResult:
    """Open one link into the MLflow server: the document must not be a 404, and an MLflow page
    must show what it names (a run, by its id: that run's page, showing the run's name as the
    store holds it; an experiment: its runs table) and not MLflow's "Page Not Found"."""
    from pipeline.tracking.links import DEFAULT_UI_URL, LINK_PREFIX

    live = session.mlflow_base + url[len(DEFAULT_UI_URL):] if url.startswith(DEFAULT_UI_URL) else url
    result = PageResult(f"link from {where}", live)
    path = urlsplit(live).path
    if f"{LINK_PREFIX}/run/" in path:  # the page of the run the id names, showing that run's name
        run_id = urllib.request.unquote(path.rsplit("/", 1)[1])
        name = run_name(session, run_id)
        if name is None:
            result.errors.append(f"the store has no run {run_id}")
        ready = (f"location.hash.includes({json.dumps(f'/runs/{run_id}')}) && document.body && "
                 f"document.body.innerText.includes({json.dumps(name or run_id)}) && "
                 f"!/matching runs/.test(document.body.innerText)")
    elif f"{LINK_PREFIX}/experiments/" in path:
        ready = "document.body && /evaluate@|report|train@/.test(document.body.innerText)"
    else:  # a file served from the store: the report, a Data Docs page
        ready = "document.readyState === 'complete'"
    page = new_page(session, result)
    statuses = []
    page.on("response", lambda r: statuses.append(r.status) if r.request.resource_type == "document" else None)
    try:
        page.goto(live, wait_until="load", timeout=60_000)
        page.wait_for_function(ready, timeout=60_000)
    except Exception as error:
        result.errors.append(f"did not show what it names within 60 s ({type(error).__name__})")
    page.wait_for_timeout(500)
    text = page.evaluate("document.body ? document.body.innerText : ''")
    if statuses and statuses[-1] >= 400:
        result.errors.append(f"HTTP {statuses[-1]}: {text.strip()[:300]}")
    if NOT_FOUND.search(text):
        result.errors.append(f"'not found' on the page: {text.strip()[:300]}")
    result.notes.append(f"opened {page.url}")
    if session.shots is not None and shot:
        page.screenshot(path=str(session.shots / f"{shot}.png"), full_page=True)
    page.context.close()
    return result


def mlflow_pages(session: Session, checkout: Path, profile: str) -> list[PageResult]:
    from mlflow.tracking import MlflowClient

    from pipeline.tracking.links import experiment_link
    from pipeline.tracking.runs import experiment_name

    store = checkout / "mlflow.db"
    if MlflowClient(f"sqlite:///{store}").get_experiment_by_name(experiment_name(profile)) is None:
        return [PageResult("mlflow", str(store), [f"no experiment {experiment_name(profile)} in {store}"])]
    result = PageResult("mlflow", experiment_link(experiment_name(profile)))
    check_page(session, result, "document.body && /evaluate@|report|train@/.test(document.body.innerText)", 90,
               "mlflow")
    if "workflowType=machine_learning" not in result.notes[-1]:
        result.errors.append("the experiment did not open in the model-training view")
    results = [result]
    paper = checkout_root(checkout, profile) / "reports" / profile / "paper.html"
    if paper.is_file():  # the report's links, also when the report check did not run
        from pipeline.tracking.links import DEFAULT_UI_URL

        session.mlflow_links += [("report", h) for h in re.findall(r'href="([^"]+)"', paper.read_text())
                                 if h.startswith(DEFAULT_UI_URL)]
    shot = "mlflow-run"
    for where, url in dict.fromkeys(session.mlflow_links):
        results.append(follow_link(session, where, url, shot if "/maopd/run/" in url else None))
        shot = None if "/maopd/run/" in url else shot
    session.mlflow_links.clear()
    return results


def checkout_root(checkout: Path, profile: str) -> Path:
    from flows.workspaces import RunLayout

    return RunLayout.for_profile(checkout, profile).root


def prefect_api(api: str, path: str, body: dict) -> list:
    request = urllib.request.Request(f"{api}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def prefect_pages(session: Session, checkout: Path, profile: str, stages: list[str]) -> list[PageResult]:
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    api = f"{ui}/api"
    env = {**base_env(), "PREFECT_HOME": str(session.work / "prefect"), "PREFECT_API_URL": api,
           "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_LEVEL": "INFO",
           "MLFLOW_UI_URL": session.mlflow_base or ""}
    with contextlib.ExitStack() as stack:
        stack.enter_context(background([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                                        "--port", str(port)], env, session.work / "prefect-server.log"))
        wait_http(f"{api}/health", 180, "prefect server")
        subprocess.run([sys.executable, "-m", "flows.deploy", "--worker-starting", "cpu"], cwd=ROOT, env=env,
                       check=True, capture_output=True)
        stack.enter_context(background([str(BIN / "prefect"), "worker", "start", "--pool", "cpu"], env,
                                       session.work / "prefect-worker.log"))
        run = subprocess.run([str(BIN / "prefect"), "deployment", "run", "maopd-paper/smoke", "-p",
                              f"profile={profile}", "-p", f"stages={json.dumps(stages)}", "-p",
                              f"checkout={checkout}", "--watch",
                              "--watch-timeout", "900"], cwd=ROOT, env=env, capture_output=True, text=True)
        found = re.search(r"UUID: ([0-9a-f-]{36})", run.stdout)
        if not found:
            return [PageResult("prefect", api, [f"no flow run started: {(run.stdout + run.stderr)[-800:]}"])]
        flow_run = found.group(1)
        result = PageResult("prefect", f"{ui}/runs/flow-run/{flow_run}")
        if run.returncode != 0:
            result.errors.append(f"the flow run did not complete: {(run.stdout + run.stderr)[-800:]}")
        ready = "document.body && " + " && ".join(f"document.body.innerText.includes({json.dumps(s)})"
                                                  for s in [*stages[:1], "Completed"])
        check_page(session, result, ready, 90, "prefect")
        results = [result, summary_page(session, api, ui, flow_run, profile), *deployments_pages(session, api, ui)]
        # the tasks' links to their runs (Prefect keeps a link artifact as markdown `[text](url)`)
        artifacts = prefect_api(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run]}}})
        links = [("Prefect task", url) for a in artifacts if a.get("key") != f"maopd-{profile}-summary"
                 for url in re.findall(r"\]\((http[^)]+)\)", str(a.get("data") or ""))]
        if not links:
            result.errors.append("no task links its MLflow run")
        results += [follow_link(session, where, url) for where, url in dict.fromkeys(session.mlflow_links + links)]
        session.mlflow_links.clear()
    return results


def summary_page(session: Session, api: str, ui: str, flow_run: str, profile: str) -> PageResult:
    """The summary artifact in the UI: its tables fit the page, its links are collected."""
    artifacts = prefect_api(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run]},
                                                                     "key": {"any_": [f"maopd-{profile}-summary"]}}})
    if not artifacts:
        return PageResult("prefect-summary", ui, ["the flow run has no summary artifact"])
    result = PageResult("prefect-summary", f"{ui}/artifacts/artifact/{artifacts[0]['id']}")
    # a tall window: Prefect's pages scroll inside a frame, which a full-page screenshot does not unroll
    page = check_page(session, result, "document.body && document.body.innerText.includes('Main table')", 60,
                      "prefect-summary", keep=True, height=2600)
    overflow = page.evaluate(
        "[...document.querySelectorAll('table')].filter(t => { const r = t.getBoundingClientRect(); "
        "let p = t.parentElement; while (p && p.clientWidth === 0) p = p.parentElement; "
        "return r.right > window.innerWidth || t.scrollWidth > t.clientWidth + 1 || "
        "(p && t.scrollWidth > p.clientWidth + 1); }).map(t => t.innerText.slice(0, 60))")
    tables = page.evaluate("document.querySelectorAll('table').length")
    links = page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)")
    page.context.close()
    if overflow:
        result.errors.append(f"tables wider than the page: {overflow}")
    bad = [h for h in links if h.startswith("file:")]
    if bad:
        result.errors.append(f"file:// links, which a browser does not open from an http page: {bad}")
    ours = [("Prefect summary", h) for h in links if session.mlflow_base and h.startswith(session.mlflow_base)]
    if not ours:
        result.errors.append("the summary holds no link into MLflow")
    session.mlflow_links += ours
    result.notes.append(f"{tables} tables, all within the page; {len(ours)} MLflow links (followed below)")
    return result


def deployments_pages(session: Session, api: str, ui: str) -> list[PageResult]:
    """The deployments list shows the `paper` deployment's paused tag beside its Not Ready, and
    its page says why its schedule is paused."""
    from flows.deploy import PAUSED_TAG

    listed = PageResult("prefect-deployments", f"{ui}/deployments")
    page = check_page(session, listed, "document.body && document.body.innerText.includes('Not Ready')", 60,
                      "prefect-deployments", keep=True)
    row = page.evaluate("(() => { const r = [...document.querySelectorAll('tr')].find(r => "
                        "/\\bpaper\\b/.test(r.innerText) && r.innerText.includes('Not Ready')); "
                        "return r ? r.innerText : ''; })()")
    page.context.close()
    if PAUSED_TAG not in row:
        listed.errors.append(f"the `paper` row does not show {PAUSED_TAG!r} beside Not Ready: {row!r}")
    (paper,) = [d for d in prefect_api(api, "/deployments/filter", {}) if d["name"] == "paper"]
    detail = PageResult("prefect-deployment-paper", f"{ui}/deployments/deployment/{paper['id']}?tab=Description")
    check_page(session, detail, "document.body && document.body.innerText.includes('Schedule paused on purpose')",
               60, "prefect-deployment-paper")
    return [listed, detail]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", type=Path, default=ROOT, help="the checkout to look at (default: this one)")
    ap.add_argument("--profile", default=None, help="default: the checkout's params.yaml")
    ap.add_argument("--prefect-stages", nargs="+", default=["report"])
    ap.add_argument("--screenshots", type=Path, default=None, help="save a full-page screenshot of each page here")
    ap.add_argument("--only", nargs="+", choices=["report", "plots", "datadocs", "mlflow", "prefect"], default=None,
                    help="run only these checks (`mlflow` follows the report's links when `report` runs too)")
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
    wanted = args.only or ["report", "plots", "datadocs", "mlflow", "prefect"]
    results: list[PageResult] = []

    def show(batch: list[PageResult], seconds: float) -> None:
        for result in batch:
            status = "PASS" if result.ok else "FAIL"
            print(f"{status} {result.name:22s} {result.url}  ({seconds:.0f} s)")
            for note in result.notes:
                print(f"       {note}")
            for error in result.errors:
                print(f"       error: {error}")
        results.extend(batch)

    with tempfile.TemporaryDirectory(prefix="browser_check.") as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        session = Session(browser, args.screenshots, Path(tmp))
        checks = {"report": lambda: [report_page(session, root, profile)],
                  "plots": lambda: [plots_page(session, root)],
                  "datadocs": lambda: data_docs_pages(session, root, profile),
                  "mlflow": lambda: mlflow_pages(session, checkout, profile),
                  "prefect": lambda: prefect_pages(session, checkout, profile, args.prefect_stages)}
        with contextlib.ExitStack() as stack:
            for name in wanted:
                if name in ("mlflow", "prefect") and session.mlflow_base is None:
                    stack.enter_context(mlflow_server(session, checkout))
                started = time.perf_counter()
                show(checks[name](), time.perf_counter() - started)
        browser.close()
    failed = [r.name for r in results if not r.ok]
    print(f"browser check: {len(results) - len(failed)} of {len(results)} pages pass"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
