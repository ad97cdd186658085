"""Run, keep and list draws: full runs of the recipe under another seed set or precision path.

    python scripts/draw.py run --seed-set G                     # set G, bf16 where the CPU has it natively
    python scripts/draw.py run --seed-set G --precision float32 # the index, base model and engine in float32
    python scripts/draw.py keep .maopd/draws/tiny-G-auto-d764e7d [--name N]
    python scripts/draw.py list                                 # the kept draws (reports/<profile>/draws/)
    python scripts/draw.py hashes A-bf16-xeon-f6m167 --source .  # a draw kept before hashes, re-made here

`run` copies this checkout's code to .maopd/draws/<profile>-<set>-<precision>-<commit>/
(uncommitted code: <commit>-dirty-<code fingerprint>/; or --workspace), switches its params.yaml
to the draw, runs `dvc repro` there with this checkout's venv, DVC cache and MLflow store, and
keeps the draw's reports/<profile>/draw.json as reports/<profile>/draws/<name>.json here, where
the report reads it. The committed run's data, dvc.lock and report are not touched. Run again,
it resumes. Run from the repo root
(docs/usage.md#draws).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.draws.workspace import (
    CODE_CHANGED,
    PRECISIONS,
    DrawFailed,
    attach_hashes,
    keep_draw,
    list_draws,
    read_draw,
    run_draw,
)
from pipeline.errors import InputError


def _profile_of(workspace: Path, given: str | None) -> str:
    if given:
        return given
    held = read_draw(workspace)
    if held is not None:
        return held.profile
    import yaml

    try:
        return str(yaml.safe_load((workspace / "params.yaml").read_text())["profile"])
    except (OSError, TypeError, KeyError, yaml.YAMLError):
        raise InputError(f"{workspace}: no draw.yaml or params.yaml naming its profile; pass --profile") from None


def _minutes(value) -> str:
    return "-" if value is None else f"{value:.1f} min"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: the current folder)")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="prepare (or resume) a draw's workspace, run it, keep it")
    run.add_argument("--seed-set", default=None, help="a set of configs/seed_sets.yaml (default: params.yaml's seeds)")
    run.add_argument("--precision", choices=PRECISIONS, default="auto",
                     help="auto: bf16 where the CPU computes it natively; float32: forced (default: auto)")
    run.add_argument("--profile", default="tiny")
    run.add_argument("--workspace", type=Path, default=None,
                     help="where to run (default: .maopd/draws/<profile>-<set>-<precision>-<commit>/)")
    run.add_argument("--name", default=None, help="the kept draw's name (default: <set>-<precision>-<cpu>)")
    run.add_argument("--no-keep", action="store_true", help="run only; keep it later with `keep`")
    run.add_argument("--replace", action="store_true", help="replace a different kept draw of the same name")
    run.add_argument("--no-shared-cache", action="store_true", help="give the workspace a DVC cache of its own")
    keep = sub.add_parser("keep", help="copy a finished draw's draw.json into reports/<profile>/draws/")
    keep.add_argument("workspace", type=Path)
    keep.add_argument("--name", default=None, help="default: <set>-<precision>-<cpu>, e.g. G-bf16-xeon-f6m207")
    keep.add_argument("--profile", default=None, help="default: the workspace's")
    keep.add_argument("--replace", action="store_true", help="replace a different kept draw of the same name")
    hashes = sub.add_parser("hashes", help="give a draw kept before hashes existed the hashes of a checkout that "
                            "re-made it (its every measured number equal)")
    hashes.add_argument("name", help="the kept draw's name (reports/<profile>/draws/<name>.json)")
    hashes.add_argument("--source", type=Path, required=True, help="the checkout whose report re-made that draw")
    hashes.add_argument("--profile", default="tiny")
    listing = sub.add_parser("list", help="the kept draws")
    listing.add_argument("--profile", default="tiny")
    args = parser.parse_args(argv)
    root = args.root.resolve()

    if args.command == "run":
        result = run_draw(root, args.profile, args.seed_set, args.precision, args.workspace, args.name,
                          keep=not args.no_keep, replace=args.replace, share_cache=not args.no_shared_cache)
        print(f"draw {'resumed' if result.draw.resumed else 'run'} in {result.draw.workspace} "
              f"(code of {result.draw.commit})")
        if result.draw.code_changed:
            print(f"note: {CODE_CHANGED.format(workspace=result.draw.workspace)}")
        print(f"kept as {result.kept}" if result.kept else
              f"not kept: python scripts/draw.py keep {result.draw.workspace}")
    elif args.command == "keep":
        kept = keep_draw(args.workspace, root, _profile_of(args.workspace, args.profile), args.name, args.replace)
        print(f"kept as {kept}")
    elif args.command == "hashes":
        print(f"hashes added to {attach_hashes(root, args.profile, args.name, args.source)}")
    else:
        draws = list_draws(root, args.profile)
        if not draws:
            print(f"no kept draws in {root / 'reports' / args.profile / 'draws'}")
        for d in draws:
            print(f"{d['name']}: seed set {d['seed_set']}, {d['precision']}, {d['cpu']}; commit "
                  f"{(d.get('commit') or '-')[:12]}, {d.get('date') or '-'}, {_minutes(d.get('stage_minutes'))}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (InputError, DrawFailed) as err:
        sys.exit(f"error: {err}")
