"""Starting an SGLang server for the paper profile and waiting until it serves.

    python -m sglang.launch_server --model-path P --port N --tp-size T --host 127.0.0.1 ...

`launch_server` starts it in its own process group (SGLang forks scheduler and detokenizer
processes; `stop` ends the whole group); `wait_until_ready` polls GET /health, then
GET /get_model_info, and fails naming the URL when the process dies or time runs out.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import InputError
from pipeline.policy.sglang_backend import SGLangError


class SGLangServerConfig(BaseModel):
    """What a researcher sets when launching the rollout server (sglang.srt.server_args names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: str  # a local HF folder (or a folder holding model_ref.json)
    port: int = Field(default=30000, gt=0, lt=65536)
    host: str = "127.0.0.1"
    tp_size: int = Field(default=1, gt=0)
    mem_fraction_static: float | None = Field(default=None, gt=0, lt=1)  # KV cache share of GPU memory
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    context_length: int | None = Field(default=None, gt=0)
    # --enable-deterministic-inference: batch-invariant kernels, and `sampling_seed` honoured
    deterministic: bool = False
    extra_args: tuple[str, ...] = ()  # passed through verbatim

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


def build_command(cfg: SGLangServerConfig, python: str = sys.executable) -> list[str]:
    """The launch command line, model path resolved to the folder holding the weights."""
    from pipeline.policy.model_ref import resolve_model_dir

    model = resolve_model_dir(cfg.model_path).resolve()
    cmd = [python, "-m", "sglang.launch_server", "--model-path", str(model),
           "--port", str(cfg.port), "--tp-size", str(cfg.tp_size), "--host", cfg.host,
           "--dtype", cfg.dtype]
    if cfg.mem_fraction_static is not None:
        cmd += ["--mem-fraction-static", str(cfg.mem_fraction_static)]
    if cfg.context_length is not None:
        cmd += ["--context-length", str(cfg.context_length)]
    if cfg.deterministic:
        cmd.append("--enable-deterministic-inference")
    return cmd + list(cfg.extra_args)


def require_sglang() -> None:
    if importlib.util.find_spec("sglang") is None:
        raise SGLangError(
            "sglang is not installed in this environment (python: "
            f"{sys.executable}); it is a GPU-only dependency: use the GPU image "
            "(Dockerfile: pip install 'sglang[srt]') or point MAOPD_SGLANG_URL at a running server"
        )


def _log_tail(log_path: Path | None, lines: int = 20) -> str:
    if log_path is None or not log_path.is_file():
        return ""
    tail = log_path.read_text(errors="replace").splitlines()[-lines:]
    return f"\nlast lines of {log_path}:\n" + "\n".join(tail) if tail else ""


def wait_until_ready(
    url: str,
    timeout_s: float,
    process: subprocess.Popen | None = None,
    poll_s: float = 2.0,
    client: httpx.Client | None = None,
    log_path: Path | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll until GET /health answers 200 and GET /get_model_info names a generation model;
    return the model info. SGLangError naming `url` when `process` exits or after `timeout_s`."""
    url = url.rstrip("/")
    own_client = client is None
    client = client or httpx.Client(timeout=min(30.0, max(poll_s * 5, 1.0)))
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    try:
        while True:
            if process is not None and process.poll() is not None:
                raise SGLangError(
                    f"{url}: the server process (pid {process.pid}) exited with code "
                    f"{process.returncode} before it was ready{_log_tail(log_path)}"
                )
            try:
                health = client.get(f"{url}/health")
                if health.status_code != 200:
                    last = f"/health answered HTTP {health.status_code}"
                else:
                    info = client.get(f"{url}/get_model_info")
                    body = info.json() if info.status_code == 200 else None
                    if isinstance(body, dict) and isinstance(body.get("model_path"), str):
                        if body.get("is_generation") is False:
                            raise SGLangError(f"{url}: serves {body['model_path']}, which is not a generation model")
                        return body
                    last = f"/get_model_info answered HTTP {info.status_code}: {info.text[:200]}"
            except (httpx.TransportError, ValueError) as err:
                last = f"{type(err).__name__}: {err}"
            if time.monotonic() >= deadline:
                raise SGLangError(
                    f"{url}: SGLang server not ready after {timeout_s:g}s (last: {last}){_log_tail(log_path)}"
                )
            sleep(poll_s)
    finally:
        if own_client:
            client.close()


class SGLangServer:
    """A launched server process and its URL."""

    def __init__(self, url: str, process: subprocess.Popen, log_path: Path | None = None):
        self.url = url
        self.process = process
        self.log_path = log_path

    def wait_until_ready(self, timeout_s: float = 1800.0, poll_s: float = 2.0) -> dict[str, Any]:
        return wait_until_ready(self.url, timeout_s, self.process, poll_s, log_path=self.log_path)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM the server's process group, SIGKILL it after `timeout_s`; the exit code."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)  # the group this launch created, nothing else
        except ProcessLookupError:
            pass

    def __enter__(self) -> SGLangServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch_server(
    cfg: SGLangServerConfig,
    log_path: str | os.PathLike | None = None,
    command: Sequence[str] | None = None,
) -> SGLangServer:
    """Start the server (or `command`, for tests) in a new process group; output goes to
    `log_path` (else inherited). Does not wait: call `wait_until_ready`."""
    if command is None:
        require_sglang()
        command = build_command(cfg)
    log = Path(log_path) if log_path is not None else None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    stream = log.open("ab") if log is not None else None
    try:
        process = subprocess.Popen(list(command), stdout=stream, stderr=subprocess.STDOUT if stream else None,
                                   start_new_session=True)
    except OSError as err:
        raise InputError(f"cannot start {command[0]}: {err}") from err
    finally:
        if stream is not None:
            stream.close()
    return SGLangServer(cfg.url, process, log)


def serve_policy(cfg: SGLangServerConfig, timeout_s: float, log_path: str | os.PathLike | None = None,
                 echo: Callable[[str], None] = print) -> int:
    """Launch, wait until ready, report the URL, then serve until the process ends or the
    user interrupts; the server's exit code."""
    server = launch_server(cfg, log_path)
    try:
        info = server.wait_until_ready(timeout_s)
        echo(f"SGLang ready at {server.url} serving {info['model_path']} "
             f"(use: MAOPD_SGLANG_URL={server.url})")
        return server.process.wait()
    except KeyboardInterrupt:
        return server.stop()
    finally:
        server.stop()
