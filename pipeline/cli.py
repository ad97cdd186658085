"""The one command-line entry point: `python -m pipeline <command>`.

  run STAGE [ARG]       run one stage on the active profile (what dvc.yaml calls)
  check-params          validate params.yaml and print the active profile
  serve-retriever       start the Search-R1 compatible /retrieve server on an index
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import time
from pathlib import Path

from pipeline.config import ConfigError, load_params
from pipeline.io import InputError, ValidationFailed


def _parser() -> argparse.ArgumentParser:
    from pipeline.stages import STAGES

    p = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", default="params.yaml", help="parameters file (default: params.yaml)")
    p.add_argument("--profile", default=None, help="override the profile switch of the parameters file")
    p.add_argument("--root", default=".", help="repository root holding data/ and reports/ (default: .)")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one pipeline stage")
    run.add_argument("stage", choices=sorted(STAGES))
    run.add_argument("arg", nargs="?", default=None, help="the foreach item of the stage (system, ablation)")
    sub.add_parser("check-params", help="validate params.yaml")
    serve = sub.add_parser("serve-retriever", help="serve an index over HTTP (Search-R1 /retrieve API)")
    serve.add_argument("--index", default="data/index")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    return p


def _append_timing(root: Path, timing: dict) -> None:
    """One line per stage run in data/timings.jsonl (read by benchmarks/bench_pipeline.py)."""
    path = root / "data" / "timings.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(timing) + "\n")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("pipeline").setLevel(logging.INFO)
    args = _parser().parse_args(argv)
    try:
        params = load_params(args.params, profile=args.profile)
        root = Path(args.root).resolve()
        if args.command == "check-params":
            print(f"{args.params}: valid; active profile {params.profile}")
            return 0
        if args.command == "serve-retriever":
            from pipeline.retrieval.server import serve

            serve(root / args.index, host=args.host, port=args.port)
            return 0
        from pipeline.stages import STAGES

        fn = STAGES[args.stage]
        started = time.perf_counter()
        summary = fn(params, root, args.arg) if args.arg is not None else fn(params, root)
        name = args.stage if args.arg is None else f"{args.stage}@{args.arg}"
        timing = {"stage": name, "profile": params.profile, "seconds": round(time.perf_counter() - started, 2),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
        _append_timing(root, timing)
        print(json.dumps({**timing, **(summary or {})}, default=str))
        return 0
    except (ConfigError, InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValidationFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
