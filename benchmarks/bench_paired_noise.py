"""How much common random numbers narrow a paired interval, measured on dev in one run.

Every evaluated system draws the same random numbers for the same request of the same
trajectory (pipeline.policy.sampling_seeds), so in a paired gap between two systems evaluated
with one seed the noise they share cancels (where their policies differ, their samples still
do). This scores two trained models (default:
the base model and the Stage-I Teacher, cascade) on every dev question x 4 runs under eval
seeds 1 and 2, then prints the paired bootstrap 95% interval of the macro avg@4 gap for the
two same-seed pairs (common numbers) and the two cross-seed pairs (independent numbers), and
the ratio of their mean half-widths, and how often the two models give the same final answer
under common numbers (what limits the narrowing). Dev only: this decides nothing on test.
Needs the models of a `make repro`. Run from the repo root:
.venv/bin/python -m benchmarks.bench_paired_noise [MODEL_A MODEL_B]"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from pipeline.config import load_params, workflow_config
from pipeline.errors import InputError
from pipeline.eval.bootstrap import paired_bootstrap
from pipeline.eval.records import per_question_scores
from pipeline.eval.run import evaluate_system
from pipeline.stage_io.inputs import open_eval_backend, open_retriever, read_split, require_model

RUNS, SEEDS, DRAWS = 4, (1, 2), 2000


def main(model_a: str = "data/models/base", model_b: str = "data/models/teacher") -> None:
    root = Path(".")
    try:
        for model in (model_a, model_b):
            require_model(root / model)
    except InputError as err:
        print(f"skipped: {err}")
        return
    params = load_params("params.yaml", "tiny")
    dev, retriever = read_split(root, "dev"), open_retriever(root)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    start, records = time.perf_counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        for label, model in (("a", model_a), ("b", model_b)):
            backend = open_eval_backend(root / model, params.engine)
            for seed in SEEDS:
                records.append(evaluate_system(dev, backend, retriever, cfg, RUNS, 32, Path(tmp) / f"{label}{seed}",
                                               seed, system=f"{label}{seed}", workflow="cascade",
                                               progress=False).records)
    answers = [r.sort_values(["question_id", "run"])["strict_answer"].to_numpy() for r in records]
    same = [(answers[i] == answers[len(SEEDS) + i]).mean() for i in range(len(SEEDS))]  # a{s} vs b{s}
    scores = per_question_scores(pd.concat(records, ignore_index=True), runs=RUNS)
    widths = {"common": [], "independent": []}
    print(f"{model_b} - {model_a}, dev ({len(dev)} questions x {RUNS} runs), macro avg@{RUNS} gap, 95% interval:")
    for sa in SEEDS:
        for sb in SEEDS:
            gap = paired_bootstrap(scores, f"a{sa}", f"b{sb}", draws=DRAWS, seed=0, level=0.95)
            kind = "common" if sa == sb else "independent"
            widths[kind].append((gap["high"] - gap["low"]) / 2)
            print(f"  seeds {sa}/{sb} ({kind:11s}) {gap['diff']:+6.2f} [{gap['low']:+6.2f}, {gap['high']:+6.2f}]"
                  f"  half-width {widths[kind][-1]:.2f}")
    common, independent = (sum(w) / len(w) for w in (widths["common"], widths["independent"]))
    print(f"mean half-width: common {common:.2f}, independent {independent:.2f}, "
          f"ratio {common / independent:.2f} (variance ratio {(common / independent) ** 2:.2f})")
    print(f"identical final answers of the two models: {100 * sum(same) / len(same):.0f}% with common numbers")
    print(f"time {time.perf_counter() - start:.0f} s, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main(*sys.argv[1:3])
