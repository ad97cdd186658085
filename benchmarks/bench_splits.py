"""Benchmark: dedup + test/dev sampling at paper scale on the synthetic world.

170,000 training questions (nq + hotpotqa) plus test pools of the published sizes,
the paper's quotas 812/812/812/813/813/813/125 and seed 20260728.
Target: make_splits (dedup + sampling) <= 10 s. Run: python benchmarks/bench_splits.py
"""

from __future__ import annotations

import resource
import sys
import time

from pipeline.data.dedup import make_splits
from pipeline.data.world import WorldConfig, generate_world

TARGET_SECONDS = 10.0
SEED = 20260728
QUOTAS = {"nq": 812, "triviaqa": 812, "popqa": 812, "hotpotqa": 813, "2wiki": 813, "musique": 813, "bamboogle": 125}
CONFIG = WorldConfig(
    seed=SEED,
    n_countries=60, n_cities=3000, n_people=20000, n_films=8000, n_books=8000, n_companies=5000,
    train_questions={"nq": 79_553, "hotpotqa": 90_447},  # 170,000
    # published pool sizes (TriviaQA, PopQA test; HotpotQA, 2Wiki, MuSiQue dev); Bamboogle above its
    # quota of 125 so that the planted leaks can be removed
    test_questions={"nq": 3610, "triviaqa": 11313, "popqa": 14267, "hotpotqa": 7405, "2wiki": 12576,
                    "musique": 2417, "bamboogle": 200},
)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    t0 = time.perf_counter()
    world = generate_world(CONFIG)
    t_gen = time.perf_counter() - t0
    rss_gen = peak_rss_mib()
    q = world.questions
    n_train = int((q["split"] == "train").sum())

    t0 = time.perf_counter()
    result = make_splits(q, train_datasets=["nq", "hotpotqa"], test_quotas=QUOTAS, dev_size=500, seed=SEED)
    t_split = time.perf_counter() - t0

    print(f"questions: {len(q):,} ({n_train:,} train-pool, {len(q) - n_train:,} test-pool); "
          f"passages: {len(world.passages):,}")
    print(f"generation: {t_gen:.2f} s (peak RSS so far {rss_gen:.0f} MiB)")
    print(f"dedup + sampling: {t_split:.2f} s (target <= {TARGET_SECONDS:.0f} s, ratio {t_split / TARGET_SECONDS:.2f})")
    print(f"removed: {result.report['removed']}")
    print(f"sizes: {result.report['sizes']}")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    ok = t_split <= TARGET_SECONDS and result.report["sizes"]["test"] == sum(QUOTAS.values())
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
