"""The `report` stage on synthetic records: 8 systems x the tiny test size, then x the
paper size (5,000 questions, 4 runs, 4,000 bootstrap draws).

The MLflow store (in a temporary folder, with one fake training run) is created before
timing, as in the pipeline where it already exists. Prints seconds, peak RSS and
PASS/FAIL against the 30 s target. Run: .venv/bin/python benchmarks/bench_report.py
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import load_params
from pipeline.eval.synthetic import synthetic_records
from pipeline.paths import eval_dir
from pipeline.systems import BY_NAME, SYSTEMS

TARGET_S = 30.0
REPO = Path(__file__).resolve().parents[1]


def peak_rss_mib() -> float:
    unit = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit / 2**20


def prepare(root: Path, quotas: dict[str, int]) -> int:
    for i, s in enumerate(SYSTEMS):
        path = eval_dir(root, s.name) / "records.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        synthetic_records(s.name, s.published_avg4 / 100, quotas, seed=i).to_parquet(path)
    return sum(quotas.values())


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench_report."))
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow.db"
    os.environ["MLFLOW_ARTIFACT_ROOT"] = (tmp / "artifacts").as_uri()
    from pipeline.stages.report import run_report
    from pipeline.tracking.runs import stage_run

    ok = True
    for profile in ("tiny", "paper"):
        params = load_params(REPO / "params.yaml", profile=profile)
        with stage_run(BY_NAME["multiagent_opd"].train_stage, profile, tags={"system": "multiagent_opd"},
                       root=tmp) as mlf:
            for step in range(0, 400, 10):
                mlf.log_metrics({"dev_em": 0.2 + step / 4000, "dev_no_search_share": 0.01}, step=step)
        root = tmp / profile
        n = prepare(root, dict(params.data.test_quotas))
        start = time.perf_counter()
        summary = run_report(params, root)
        seconds = time.perf_counter() - start
        passed = seconds <= TARGET_S
        ok &= passed
        print(f"report {profile}: 8 systems x {n} questions x {params.common.eval.runs} runs, "
              f"{params.common.eval.bootstrap_draws} draws: {seconds:.2f} s "
              f"(stage's own timer {summary['seconds']:.2f} s), peak RSS {peak_rss_mib():.0f} MiB, "
              f"target <= {TARGET_S:.0f} s: {'PASS' if passed else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
