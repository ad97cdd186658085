"""What writing the run state costs a training stage: for each system's checkpoints under
data/checkpoints/, the size of `run_state.pt` and the seconds to write it again (torch.save to
a scratch file, as save_checkpoint does), summed over the checkpoints a run of the active
profile writes (`steps / checkpoint_every`, each assumed the size of the newest one: an upper
bound, since the caches fill up over a run).

    python benchmarks/bench_run_state.py [--root .]

Needs a checkout where the training stages have run.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from pipeline.config import load_params
    from pipeline.rl.checkpoint import RUN_STATE_FILE, list_checkpoints

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(ROOT))
    args = ap.parse_args()
    root = Path(args.root).resolve()
    params = load_params(root / "params.yaml")
    every = params.train.shared.checkpoint_every
    total = 0.0
    for folder in sorted((root / "data" / "checkpoints").iterdir()):
        found = list_checkpoints(folder)
        if not found or not (found[-1][1] / RUN_STATE_FILE).is_file():
            continue
        steps = getattr(params.train.systems, folder.name).steps
        path = found[-1][1] / RUN_STATE_FILE
        state = torch.load(path, weights_only=True)
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            torch.save(state, Path(tmp) / RUN_STATE_FILE)
            seconds = time.perf_counter() - started
        writes = -(-steps // every)
        total += writes * seconds
        print(f"{folder.name}: run_state.pt {path.stat().st_size / 2**20:.0f} MB at step {found[-1][0]}, "
              f"written in {seconds:.2f} s; x {writes} checkpoints = {writes * seconds:.1f} s at most", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"all trainings: at most {total:.1f} s of run-state writes; peak RSS {peak:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
