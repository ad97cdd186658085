"""Launching SGLang: the command line, the missing-package message, readiness polling against a
fake server, a process that dies, a real subprocess started and stopped, and the CLI."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.cli import main
from pipeline.policy import sglang_server
from pipeline.policy.sglang_backend import SGLangError
from pipeline.policy.sglang_server import SGLangServerConfig, build_command, launch_server, wait_until_ready
from tests.helpers.fake_sglang import FakeSGLangState, free_port, serve_state

REPO = Path(__file__).resolve().parents[1]
HAS_SGLANG = importlib.util.find_spec("sglang") is not None


@pytest.fixture()
def model_dir(tmp_path) -> Path:
    folder = tmp_path / "Qwen3-4B-Instruct-2507"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_command_has_the_researchers_options(model_dir):
    cfg = SGLangServerConfig(model_path=str(model_dir), port=30123, tp_size=2, mem_fraction_static=0.7,
                             dtype="bfloat16", context_length=8192, deterministic=True,
                             extra_args=("--disable-radix-cache",))
    assert build_command(cfg, python="py") == [
        "py", "-m", "sglang.launch_server", "--model-path", str(model_dir.resolve()), "--port", "30123",
        "--tp-size", "2", "--host", "127.0.0.1", "--dtype", "bfloat16", "--mem-fraction-static", "0.7",
        "--context-length", "8192", "--enable-deterministic-inference", "--disable-radix-cache",
    ]
    assert cfg.url == "http://127.0.0.1:30123"


def test_command_defaults_and_model_ref_folders(model_dir, tmp_path):
    from pipeline.policy.model_ref import MODEL_REF

    ref = tmp_path / "base"
    ref.mkdir()
    (ref / MODEL_REF).write_text(json.dumps({"path": f"../{model_dir.name}"}))
    cmd = build_command(SGLangServerConfig(model_path=str(ref), host="0.0.0.0"), python="py")
    assert cmd == ["py", "-m", "sglang.launch_server", "--model-path", str(model_dir.resolve()),
                   "--port", "30000", "--tp-size", "1", "--host", "0.0.0.0", "--dtype", "auto"]
    assert SGLangServerConfig(model_path=str(ref), host="0.0.0.0").url == "http://127.0.0.1:30000"


@pytest.mark.parametrize("field, value", [("tp_size", 0), ("mem_fraction_static", 1.2), ("port", 70000),
                                          ("dtype", "int4"), ("tensor_parallel", 2)])
def test_bad_settings_are_refused(field, value, model_dir):
    with pytest.raises(ValidationError, match=field):
        SGLangServerConfig(model_path=str(model_dir), **{field: value})


def test_a_missing_model_folder_is_named(tmp_path):
    from pipeline.errors import InputError

    with pytest.raises(InputError, match="nowhere"):
        build_command(SGLangServerConfig(model_path=str(tmp_path / "nowhere")))


@pytest.mark.skipif(HAS_SGLANG, reason="sglang is installed here")
def test_launch_without_sglang_says_so(model_dir):
    with pytest.raises(SGLangError, match="sglang is not installed .*Dockerfile"):
        launch_server(SGLangServerConfig(model_path=str(model_dir)))


def test_require_sglang_checks_the_package(monkeypatch):
    monkeypatch.setattr(sglang_server.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SGLangError, match="sglang is not installed"):
        sglang_server.require_sglang()


# -- readiness -------------------------------------------------------------------------------
class _NoModel:
    """The readiness probe never generates; the fake only needs an object to hold."""


def test_wait_until_ready_polls_through_a_starting_server():
    state = FakeSGLangState(_NoModel(), model_path="/models/qwen", not_ready=3)
    waits: list[float] = []
    with serve_state(state) as url:
        info = wait_until_ready(url, timeout_s=30, poll_s=0.01, sleep=waits.append)
    assert info["model_path"] == "/models/qwen" and info["is_generation"] is True
    assert [path for path, _ in state.requests] == ["/health"] * 4 + ["/get_model_info"]
    assert waits == [0.01] * 3


def test_wait_until_ready_gives_up_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SGLangError, match=rf"{url}: SGLang server not ready after 0.3s \(last: ConnectError"):
        wait_until_ready(url, timeout_s=0.3, poll_s=0.05)


def test_a_server_process_that_dies_is_reported_with_its_log(model_dir, tmp_path):
    log = tmp_path / "logs" / "sglang.log"
    cfg = SGLangServerConfig(model_path=str(model_dir), port=free_port())
    dying = [sys.executable, "-c", "print('RuntimeError: CUDA out of memory', flush=True); raise SystemExit(3)"]
    server = launch_server(cfg, log, command=dying)
    pattern = (rf"(?s)^{re.escape(cfg.url)}: the server process .* exited with code 3 before it was ready"
               r".*CUDA out of memory")
    with pytest.raises(SGLangError, match=pattern):
        server.wait_until_ready(timeout_s=60, poll_s=0.05)


FAKE_SERVER = textwrap.dedent("""
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = {"/health": b"", "/get_model_info": json.dumps(
                {"model_path": sys.argv[2], "is_generation": True}).encode()}.get(self.path)
            self.send_response(404 if body is None else 200)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
""")


def test_launch_wait_and_stop_a_real_process(model_dir, tmp_path):
    cfg = SGLangServerConfig(model_path=str(model_dir), port=free_port())
    command = [sys.executable, "-c", FAKE_SERVER, str(cfg.port), str(model_dir)]
    with launch_server(cfg, tmp_path / "server.log", command=command) as server:
        info = server.wait_until_ready(timeout_s=60, poll_s=0.05)
        assert info["model_path"] == str(model_dir)
        assert server.process.poll() is None
    assert server.process.poll() is not None  # stopped on leaving the block


# -- CLI ---------------------------------------------------------------------------------------
def test_cli_serve_policy_without_sglang(model_dir, tmp_path, capsys):
    if HAS_SGLANG:
        pytest.skip("sglang is installed here")
    code = main(["--params", str(REPO / "params.yaml"), "--root", str(tmp_path), "serve-policy",
                 "--model", model_dir.name, "--port", "30001", "--tp", "1"])
    assert code == 1
    assert "sglang is not installed" in capsys.readouterr().err


def test_cli_serve_policy_refuses_bad_settings(model_dir, tmp_path, capsys):
    code = main(["--params", str(REPO / "params.yaml"), "--root", str(tmp_path), "serve-policy",
                 "--model", model_dir.name, "--tp", "0"])
    assert code == 2
    assert "tp_size" in capsys.readouterr().err
