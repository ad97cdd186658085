"""Where every stage reads and writes, relative to the repository root (the DVC contract:
dvc.yaml names the same paths)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def splits(self) -> Path:
        return self.root / "data" / "splits"

    def split(self, name: str) -> Path:
        return self.splits / f"{name}.parquet"

    @property
    def dedup_report(self) -> Path:
        return self.splits / "dedup_report.json"

    @property
    def corpus(self) -> Path:
        return self.root / "data" / "corpus" / "passages.parquet"

    @property
    def index(self) -> Path:
        return self.root / "data" / "index"

    def reports(self, profile: str) -> Path:
        return self.root / "reports" / profile

    @property
    def validation(self) -> Path:
        return self.root / "data" / "validation"


def model_dir(root: Path, weights: str) -> Path:
    return root / "data" / "models" / weights


def checkpoint_dir(root: Path, weights: str) -> Path:
    """Checkpoints live outside the DVC output so a killed stage can resume from them."""
    return root / "data" / "checkpoints" / weights


def audit_dir(root: Path, name: str) -> Path:
    return root / "data" / "audit" / name


def eval_dir(root: Path, name: str) -> Path:
    return root / "data" / "eval" / name
