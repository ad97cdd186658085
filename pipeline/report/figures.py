"""Matplotlib figures of the report (PNG, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pipeline.io import atomic_path  # noqa: E402
from pipeline.systems import BY_NAME  # noqa: E402


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def training_dynamics(curves: dict[str, pd.DataFrame], path: Path) -> None:
    """Dev EM and dev no-search share against the training step, one line per system."""
    fig, (ax_em, ax_ns) = plt.subplots(1, 2, figsize=(11, 4))
    for system, curve in curves.items():
        label = BY_NAME[system].label if system in BY_NAME else system
        em = curve.dropna(subset=["dev_em"])
        ns = curve.dropna(subset=["dev_no_search_share"])
        ax_em.plot(em["step"], em["dev_em"], marker=".", label=label)
        ax_ns.plot(ns["step"], ns["dev_no_search_share"], marker=".", label=label)
    ax_em.set(title="dev exact match", xlabel="training step", ylabel="dev EM")
    ax_ns.set(title="dev no-search share", xlabel="training step", ylabel="share of workflows")
    for ax in (ax_em, ax_ns):
        ax.grid(alpha=0.3)
    ax_em.legend(fontsize=8)
    _save(fig, path)


def macro_bars(ours: dict[str, float | None], published: dict[str, float], profile: str, path: Path) -> None:
    """Macro avg@4 per system: ours beside the published value."""
    systems = list(published)
    x = range(len(systems))
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.bar([i - 0.2 for i in x], [ours.get(s) or 0.0 for s in systems], width=0.4, label=f"ours ({profile})")
    ax.bar([i + 0.2 for i in x], [published[s] for s in systems], width=0.4,
           label="published (Qwen3-4B, paper)", alpha=0.6)
    ax.set_xticks(list(x), [BY_NAME[s].label for s in systems], rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="macro avg@4 (%)", title="Macro avg@4 over the seven datasets")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)
