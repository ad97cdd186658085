"""Train a candidate base model beside a run: a scratch copy of this checkout's code with the run's
splits, corpus and index, a seed set and params edits, then the `base_model` stage there.

    python scripts/base_model_candidate.py OUT --source RUN [--seed-set G] [key=value ...]

RUN is a checkout or a draw's workspace that holds data/splits, data/corpus and data/index (its
world); OUT gets this checkout's code (pipeline.checkout_copy.mirror), links to those three,
params.yaml switched to the seed set (default: RUN's) with each `key=value` set (YAML values,
e.g. tiny.base_model.reading_counterfactual=1.0), and the model in OUT/data/models/base. The stage
prints its seconds and peak memory. Then score it against RUN's base model on held-out questions
from OUT (docs/tuning.md#a-searcher-that-reads):

    cd OUT && PYTHONPATH=. python scripts/dev_gap.py --heldout 2000 SCORES \
        base=RUN/data/models/base cand=data/models/base

Run from the repo root. A rerun with the same arguments trains again (the stage has no resume).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

from pipeline.checkout_copy import mirror
from pipeline.draws.seed_sets import SEED_SETS_FILE, current_seed_set, load_seed_sets, write_seed_set
from pipeline.errors import InputError
from pipeline.params_edit import edit_file

PARTS = ("data/splits", "data/corpus", "data/index")  # what the base_model stage reads of the run


def parse_edits(pairs: list[str]) -> dict[str, object]:
    edits = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"base_model_candidate: {pair!r}: expected key=value (a params.yaml key, dotted)")
        edits[key] = yaml.safe_load(value)
    return edits


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--source", type=Path, required=True, help="a run holding data/splits and data/index")
    parser.add_argument("--seed-set", default=None, help="default: the seed set of the source's params.yaml")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("edits", nargs="*", help="params.yaml values, key=value")
    args = parser.parse_intermixed_args(argv)
    source = args.source.resolve()
    for part in PARTS:
        if not (source / part).is_dir():
            raise InputError(f"{source / part}: not found; --source must be a run that made its splits, corpus "
                             "and index")
    seed_sets = load_seed_sets(SEED_SETS_FILE)
    seed_set = args.seed_set or current_seed_set(source / "params.yaml", seed_sets)
    if seed_set is None:
        raise InputError(f"{source / 'params.yaml'}: its seeds are no set of {SEED_SETS_FILE}; pass --seed-set")
    out = args.out.resolve()
    mirror(Path.cwd(), out, args.profile)
    (out / "data").mkdir(exist_ok=True)
    for part in (p.split("/")[1] for p in PARTS):
        link = out / "data" / part
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source / "data" / part)
    write_seed_set(out / "params.yaml", seed_set, seed_sets)
    edits = parse_edits(args.edits)
    if edits:
        edit_file(out / "params.yaml", edits)
    print(f"{out}: seed set {seed_set}, {len(edits)} edit(s): {edits}", flush=True)
    env = {**os.environ, "PYTHONPATH": str(out)}
    return subprocess.run([sys.executable, "-m", "pipeline", "run", "base_model"], cwd=out, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
