"""Prefect shells around DVC: the stage walk covers the DAG; one real flow run (smoke)."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from flows.stages import paper_flow, pool_for, stage_order
from pipeline.workspace import copy_repo

from .conftest import REPO_ROOT


def _declared_stages() -> set[str]:
    stages = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    names = set()
    for name, body in stages.items():
        if "foreach" in body:
            items = body["foreach"]
            keys = items if isinstance(items, list) else list(items)
            names |= {f"{name}@{k}" for k in keys}
        else:
            names.add(name)
    return names


def test_stage_order_covers_the_dag_and_respects_dependencies():
    order = stage_order(REPO_ROOT)
    assert set(order) == _declared_stages()
    assert order.index("splits") < order.index("validate_splits")
    assert order.index("corpus") < order.index("index")


def test_model_stages_go_to_the_gpu_pool():
    assert pool_for("splits") == "cpu"
    assert pool_for("evaluate@multiagent_opd") == "gpu"


@pytest.mark.slow
def test_paper_flow_runs_a_stage_through_prefect(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    work = copy_repo(tmp_path / "repo", profile="ci")
    done = paper_flow(root=str(work), stages=["splits"])
    assert done == ["splits"]
    test = pd.read_parquet(work / "data" / "splits" / "test.parquet")
    assert len(test) > 0
