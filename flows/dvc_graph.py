"""The DVC DAG as plain data: stage names, their upstream stages, run order and pools.

No Prefect here: the flow in `flows/stages.py` consumes these functions, and the tests
check them without starting a server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

GPU_STAGE_PREFIXES = ("base_model", "validate_masks", "stage2_start", "train", "evaluate")


def stage_graph(root: Path) -> dict[str, list[str]]:
    """{stage: [stages it depends on]} for every stage of `root/dvc.yaml` (foreach items expanded),
    in a topological order (every stage after the stages it depends on)."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        graph = repo.index.graph  # an edge A -> B means A depends on B

        def name(stage) -> str:
            return stage.addressing.split(":")[-1]

        order = [s for s in reversed(list(nx.topological_sort(graph))) if hasattr(s, "cmd")]
        return {name(s): sorted(name(d) for d in graph.successors(s) if hasattr(d, "cmd")) for s in order}


def select(graph: Mapping[str, list[str]], wanted: Iterable[str] | None) -> list[str]:
    """The stages of `graph` named in `wanted` (a foreach group name, e.g. `evaluate`, selects all
    its items), in graph order; None selects everything. Unknown names are an error."""
    if wanted is None:
        return list(graph)
    wanted = list(wanted)
    unknown = [w for w in wanted if w not in graph and not any(s.split("@")[0] == w for s in graph)]
    if unknown:
        raise ValueError(f"stages: unknown stage(s) {unknown}; dvc.yaml has {sorted(graph)}")
    return [s for s in graph if s in wanted or s.split("@")[0] in wanted]


def waves(graph: Mapping[str, list[str]], chosen: Iterable[str]) -> list[list[str]]:
    """The chosen stages grouped into waves: every stage of a wave only depends on earlier waves,
    so the stages of one wave can run at the same time."""
    chosen = list(chosen)
    level: dict[str, int] = {}
    for stage in graph:  # graph order is topological
        if stage in chosen:
            level[stage] = 1 + max((level[d] for d in _chosen_ancestors(graph, stage, chosen)), default=-1)
    out: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for stage, k in level.items():
        out[k].append(stage)
    return out


def _chosen_ancestors(graph: Mapping[str, list[str]], stage: str, chosen: list[str]) -> set[str]:
    """The nearest chosen stages upstream of `stage` (through unchosen stages)."""
    found: set[str] = set()
    todo = list(graph[stage])
    seen: set[str] = set()
    while todo:
        dep = todo.pop()
        if dep in seen:
            continue
        seen.add(dep)
        if dep in chosen:
            found.add(dep)
        else:
            todo.extend(graph.get(dep, []))
    return found


def upstream_of(graph: Mapping[str, list[str]], stage: str, chosen: Iterable[str]) -> list[str]:
    return sorted(_chosen_ancestors(graph, stage, list(chosen)))


def pool_for(stage: str) -> str:
    """`gpu` for the stages that load a model (base model, training, evaluation), else `cpu`."""
    return "gpu" if stage.startswith(GPU_STAGE_PREFIXES) else "cpu"


def uncached_outputs(root: Path) -> dict[str, list[str]]:
    """{stage: its `cache: false` outputs}: what syncing a stage back copies by hand."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {s.addressing.split(":")[-1]: [o.def_path for o in s.outs if not o.use_cache]
                for s in repo.index.stages}
