"""How long `dvc repro` takes when there is nothing to do, and where DVC spends it.

    .venv/bin/python benchmarks/bench_dvc_noop.py [--checkout DIR] [--repeats 5]

Needs a checkout where `make repro` has run (every stage up to date). Times `dvc repro` and
`dvc status` `--repeats` times each, with ruamel.yaml's C parser (ruamel.yaml.clib, which
requirements.txt installs) and without it (a shadowing `_ruamel_yaml` module that fails to
import, so ruamel falls back to its pure-Python parser, as before the pin), and prints the
median seconds, the peak RSS and the ratio. Then one cProfile of a no-op `dvc repro` with the
C parser: the top functions by cumulative time inside DVC (parsing params.yaml once per stage,
dvc.yaml and dvc.lock, the per-stage read/write locks, imports).
"""

from __future__ import annotations

import argparse
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK_C_PARSER = "raise ImportError('the C parser is switched off by bench_dvc_noop.py')\n"


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak RSS MB of this child alone) of one command that must succeed."""
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"error: {' '.join(cmd)} failed in {cwd}:\n{output}")
    if cmd[1] == "repro" and "up to date" not in output:
        sys.exit(f"error: {cwd}: `dvc repro` had work to do; run `make repro` there first")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, default=ROOT)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    dvc = str(Path(sys.executable).with_name("dvc"))
    base_env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    with tempfile.TemporaryDirectory() as blocker:
        Path(blocker, "_ruamel_yaml.py").write_text(BLOCK_C_PARSER)
        pure_env = {**base_env, "PYTHONPATH": os.pathsep.join(filter(None, [blocker, base_env.get("PYTHONPATH")]))}
        results = {}
        for command in ("repro", "status"):
            for parser, env in (("C parser", base_env), ("pure Python", pure_env)):
                runs = [timed([dvc, command], args.checkout, env) for _ in range(args.repeats)]
                results[command, parser] = (statistics.median(s for s, _ in runs), max(m for _, m in runs))
    stages = len(subprocess.run([dvc, "stage", "list", "--name-only"], cwd=args.checkout, env=base_env,
                                capture_output=True, text=True, check=True).stdout.split())
    print(f"no-op DVC commands in {args.checkout} ({stages} stages), median of {args.repeats}:")
    for command in ("repro", "status"):
        c_s, c_mb = results[command, "C parser"]
        p_s, p_mb = results[command, "pure Python"]
        print(f"  dvc {command:<6}  C parser {c_s:5.2f} s ({c_mb:.0f} MB peak)   "
              f"pure Python {p_s:5.2f} s ({p_mb:.0f} MB peak)   ratio {p_s / c_s:.2f}x")
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "repro.prof"
        subprocess.run([dvc, "repro", "--cprofile-dump", str(dump)], cwd=args.checkout, env=base_env,
                       capture_output=True, check=True)
        print("\nwhere a no-op `dvc repro` spends its time (cProfile, C parser; profiling slows it down):")
        stats = pstats.Stats(str(dump))
        wanted = ("read_param_file", "dvcfile.py:336(stages)", "lockfile_contents", "rwlock.py:187(rwlock)",
                  "collect_stages", "_reproduce_stage", "stage/__init__.py:360(changed)")
        rows = [(f"{Path(key[0]).name}:{key[1]}({key[2]})", value[3], value[0])
                for key, value in stats.stats.items()
                if any(w in f"{key[0]}:{key[1]}({key[2]})" for w in wanted)]
        for name, cumulative, calls in sorted(rows, key=lambda r: -r[1]):
            print(f"  {name:<44} {cumulative:6.2f} s  {calls:5d} calls")
        print(f"  {'total':<44} {stats.total_tt:6.2f} s")


if __name__ == "__main__":
    main()
