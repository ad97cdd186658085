"""Switch this checkout's params.yaml to a seed set: every seed of the tiny profile at once.

    python scripts/seed_set.py G      # set G's seeds into params.yaml, then `make repro`
    python scripts/seed_set.py A      # back to the default seeds
    python scripts/seed_set.py        # the sets (configs/seed_sets.yaml) and which one params.yaml holds

Only the seed integers change (comments and every other value stay as they are); a full run
after the switch is an independent draw of the same recipe (docs/results.md#seed-sets).
Run from the repo root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.draws.seed_sets import SEED_SETS_FILE, current_seed_set, load_seed_sets, write_seed_set
from pipeline.errors import InputError


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", nargs="?", help="the seed set to write (omit to list the sets)")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--sets", type=Path, default=SEED_SETS_FILE)
    args = parser.parse_args(argv)
    seed_sets = load_seed_sets(args.sets)
    if args.set is None:
        held = current_seed_set(args.params, seed_sets)
        for name, seeds in seed_sets.sets.items():
            mark = "*" if name == held else " "
            print(f"{mark} {name}: " + ", ".join(f"{field} {value}" for field, value in seeds.items()))
        print(f"{args.params} holds set {held}" if held else
              f"{args.params} holds no set of {args.sets} (some seeds were edited by hand)")
        return
    changes = write_seed_set(args.params, args.set, seed_sets)
    for change in changes:
        print(f"{change.key}: {change.old} -> {change.new}")
    print(f"{args.params} now holds seed set {args.set} ({len(changes)} seeds changed)")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except InputError as err:
        sys.exit(f"error: {err}")
