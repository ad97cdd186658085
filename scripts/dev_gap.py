"""Paired dev gaps of trained models to a reference model, for choosing training sizes on dev.

Scores every model in one workflow (cascade: the Teacher's; hierarchy: the Stage-II systems') on
all dev questions x 4 runs with one eval seed, so the models share their random numbers (common
random numbers, as the test evaluation does), then prints each model's EM, searches per workflow,
forced-answer share and the funnel's role figures (Searcher fidelity, searches per Searcher call and
per 2-hop question, the 2-hop funnel: the share of 2-hop workflows whose answer was retrieved,
reported, handed and answered; pipeline.eval.funnel), and its macro avg@4 gap and Searcher-fidelity gap to the
first one with their paired bootstrap 95% intervals. Each model's records go under OUT/<label>
(evaluate_system's shards; a rerun resumes).
Dev only: it decides nothing on test. `--heldout N` scores N held-out questions of the test's
seven-dataset composition instead of the dev split, which holds the training datasets only
(pipeline/data/heldout.py: new questions of the profile's synthetic world, none a train, dev or test
question; written to OUT/heldout.parquet). A model written `reference:<dir>` is run by the reference
backend (transformers, lock-step ticks) instead of the engine: the same weights through both
check that the engine samples the same distribution (docs/profile.md#the-engine).
Run from the repo root, after `make repro` (or in a clone that has data/splits and data/index):
    python scripts/dev_gap.py OUT base=data/models/base t32=data/models/teacher [label=model ...]
    python scripts/dev_gap.py --workflow hierarchy OUT base=data/models/base opd=data/models/multiagent_opd
    python scripts/dev_gap.py --workflow hierarchy --heldout 2000 OUT base=data/models/base opd=...
    python scripts/dev_gap.py --workflow hierarchy OUT ref=reference:data/models/base engine=data/models/base
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import pandas as pd

from pipeline.config import Params, load_params, workflow_config
from pipeline.data.heldout import composition, held_out_questions
from pipeline.errors import InputError
from pipeline.eval.bootstrap import paired_bootstrap
from pipeline.eval.funnel_metrics import BY_KEY, category_of, funnel_steps, has_funnel, paired_rate_gap, rate_value
from pipeline.eval.records import per_question_scores
from pipeline.eval.run import evaluate_system
from pipeline.eval.stated_reads import (
    BY_STATED_KEY,
    has_stated,
    hops_by_question,
    index_passages,
    reads_table,
    stated_columns,
)
from pipeline.io import write_parquet
from pipeline.policy.hf_backend import HFBackend
from pipeline.stage_io.inputs import open_eval_backend, open_retriever, read_split, require_model
from pipeline.stage_io.sources import world

RUNS, SEED, DRAWS, SHARD = 4, 1, 4000, 32
WORKFLOWS = ("cascade", "hierarchy")
REFERENCE = "reference:"


def open_model(model: Path, reference: bool, engine):
    return HFBackend(model) if reference else open_eval_backend(model, engine)


def held_out_split(params: Params, n: int, out: Path) -> pd.DataFrame:
    """n held-out questions of the test's composition from this profile's world, kept in OUT."""
    if params.data.source != "synthetic":
        raise InputError(f"dev_gap: --heldout needs the synthetic world; profile {params.profile!r} reads "
                         f"{params.data.source} data (its dev split is the held-out set there)")
    questions = held_out_questions(world(params), composition(dict(params.data.test_quotas), n))
    write_parquet(out / "heldout.parquet", questions)
    return questions


def role_figures(records: pd.DataFrame) -> str:
    """The funnel's role-level figures of one model's records (pipeline.eval.funnel_metrics)."""
    if not has_funnel(records):
        return ""
    two_hop = records[[category_of(f, n) == "2-hop" for f, n in zip(records["family"], records["n_hops"])]]
    fidelity = rate_value(records, BY_KEY["searcher_fidelity"])
    return (f", Searcher fidelity {'-' if fidelity is None else f'{fidelity:.1f}%'}, "
            f"{rate_value(records, BY_KEY['searches_per_searcher_call']):.2f} searches per Searcher call"
            + (f", {two_hop['search_actions'].mean():.2f} searches per 2-hop question, 2-hop funnel "
               + ", ".join(f"{step} {100 * share:.1f}%" for step, share in funnel_steps(two_hop)[
                   ["retrieved", "reported", "handed", "correct"]].mean().items()) if len(two_hop) else ""))


def stated_figures(records: pd.DataFrame, label: str) -> str:
    """Facts read on single-hop questions (pipeline.eval.stated_reads): fidelity on the stating
    passage and the share of stating reads whose report is the right sentence copied wrong."""
    if not has_stated(records):
        return ""
    one = reads_table(records, [label]).set_index("category")
    if "single-hop" not in one.index:
        return ""
    row = one.loc["single-hop"]
    return (f", single-hop: stating passage read by {row['stated']:.1f}% of calls, fidelity on it "
            f"{row['fidelity_stated']:.1f}%, right sentence copied wrong {row['copied_wrong']:.1f}%")


def single_hop(records: pd.DataFrame) -> pd.DataFrame:
    return records[[category_of(f, n) == "single-hop" for f, n in zip(records["family"], records["n_hops"])]]


def main(out: Path, models: list[tuple[str, Path, bool]], workflow: str = "cascade", heldout: int = 0) -> None:
    if len(models) < 2:
        raise InputError("dev_gap: give OUT and at least two label=model_dir arguments (the first is the reference)")
    for _, model, _ in models:
        require_model(model)
    root = Path(".")
    params = load_params("params.yaml")
    dev = held_out_split(params, heldout, out) if heldout else read_split(root, "dev")
    retriever = open_retriever(root)
    hops = hops_by_question(dev, "the scored questions")
    passages = index_passages(pd.read_parquet(root / "data/index/passages.parquet"), "data/index/passages.parquet")
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    records = []
    for label, model, reference in models:
        start = time.perf_counter()
        backend = open_model(model, reference, params.engine)
        r = evaluate_system(dev, backend, retriever, cfg, RUNS, SHARD, out / label, SEED, system=label,
                            workflow=workflow, progress=False).records
        if has_funnel(r) and "searcher_passage_ids" in r and any(hops.values()):
            r = stated_columns(r, hops, passages)
        records.append(r)
        source = f"{REFERENCE if reference else ''}{model}"
        print(f"{label} ({source}): EM {100 * r['strict_correct'].astype(float).mean():.2f}%, "
              f"{r['search_actions'].mean():.2f} searches per workflow, "
              f"forced answers {100 * r['forced_answer'].astype(float).mean():.1f}%{role_figures(r)}"
              f"{stated_figures(r, label)} "
              f"[{time.perf_counter() - start:.0f} s]", flush=True)
    scores = per_question_scores(pd.concat(records, ignore_index=True), runs=RUNS)
    reference = models[0][0]
    questions = "held-out" if heldout else "dev"
    print(f"{questions}, {workflow} ({len(dev)} questions x {RUNS} runs, eval seed {SEED}): macro avg@{RUNS} gap to "
          f"{reference}, paired bootstrap 95% interval")
    for label, _, _ in models[1:]:
        gap = paired_bootstrap(scores, reference, label, draws=DRAWS, seed=0, level=0.95)
        line = f"  {label} - {reference}: {gap['diff']:+.2f} [{gap['low']:+.2f}, {gap['high']:+.2f}]"
        both = pd.concat([records[0], records[[m[0] for m in models].index(label)]], ignore_index=True)
        if has_funnel(both):
            fidelity = paired_rate_gap(both, label, reference, BY_KEY["searcher_fidelity"], draws=DRAWS, seed=0,
                                       level=0.95)
            if fidelity is not None:
                line += (f"; Searcher fidelity {fidelity['diff']:+.2f} points "
                         f"[{fidelity['low']:+.2f}, {fidelity['high']:+.2f}]")
        if has_stated(both):
            for key, name in (("searcher_fidelity_stated", "single-hop fidelity on the stating passage"),
                              ("copied_wrong_share", "single-hop right sentence copied wrong")):
                gap = paired_rate_gap(single_hop(both), label, reference, BY_STATED_KEY[key], draws=DRAWS, seed=0,
                                      level=0.95)
                if gap is not None:
                    line += f"; {name} {gap['diff']:+.2f} points [{gap['low']:+.2f}, {gap['high']:+.2f}]"
        print(line)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


def _parse(args: list[str]) -> tuple[Path, list[tuple[str, Path, bool]], str, int]:
    workflow, heldout = "cascade", 0
    while args[:1] in (["--workflow"], ["--heldout"]):
        flag, value, args = args[0], (args[1] if len(args) > 1 else None), args[2:]
        if flag == "--workflow":
            if value not in WORKFLOWS:
                raise InputError(f"dev_gap: --workflow: expected one of {', '.join(WORKFLOWS)}")
            workflow = value
        else:
            if value is None or not value.isdigit() or int(value) <= 0:
                raise InputError(f"dev_gap: --heldout: expected a positive number of questions, got {value!r}")
            heldout = int(value)
    if not args:
        raise InputError("dev_gap: usage: python scripts/dev_gap.py [--workflow cascade|hierarchy] [--heldout N] "
                         "OUT label=model_dir label=model_dir ...")
    models = []
    for arg in args[1:]:
        label, sep, model = arg.partition("=")
        if not sep or not label or not model:
            raise InputError(f"dev_gap: argument {arg!r}: expected label=model_dir")
        reference = model.startswith(REFERENCE)
        models.append((label, Path(model.removeprefix(REFERENCE)), reference))
    return Path(args[0]), models, workflow, heldout


if __name__ == "__main__":
    try:
        main(*_parse(sys.argv[1:]))
    except InputError as err:
        sys.exit(f"error: {err}")
