"""Draws as a Prefect flow (`maopd-draws`): one task per seed set, each a whole draw
(pipeline.draws.workspace.run_draw: its own workspace under .maopd/draws/, `dvc repro` there, kept in
reports/<profile>/draws/). The draws run one after another unless `parallel`: each is a full run
of the pipeline, and a 2-core machine runs one at a time best. A draw that fails fails its task;
the others still run, and running the flow again resumes the failed one's workspace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from prefect import flow, get_run_logger, task

from pipeline.draws.workspace import CODE_CHANGED, DrawFailed, run_draw

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SEED_SETS = ("G",)


@task(name="draw", task_run_name="draw {seed_set}, {precision}")
def draw_task(seed_set: str | None, precision: str, profile: str, checkout: str, keep: bool = True,
              replace: bool = False) -> str:
    """One draw; returns the kept file (or the workspace, when not kept)."""
    logger = get_run_logger()
    result = run_draw(Path(checkout), profile=profile, seed_set=seed_set, precision=precision, keep=keep,
                      replace=replace, on_line=logger.info)
    where = result.kept or result.draw.workspace
    if result.draw.code_changed:
        logger.warning(f"draw {seed_set}, {precision}: {CODE_CHANGED.format(workspace=result.draw.workspace)}")
    logger.info(f"draw {seed_set}, {precision}: {'resumed' if result.draw.resumed else 'ran'} in "
                f"{result.draw.workspace} (code of {result.draw.commit}); {'kept as' if result.kept else 'left in'} "
                f"{where}")
    return str(where)


@flow(name="maopd-draws")
def draws_flow(seed_sets: list[str] | None = None,
               precision: Literal["auto", "float32"] = "auto", profile: str = "tiny", checkout: str = str(ROOT),
               keep: bool = True, replace: bool = False, parallel: bool = False) -> dict[str, str]:
    """A draw of each of `seed_sets` (configs/seed_sets.yaml; default: G) at `precision`;
    returns {seed set: kept file or workspace}. A failed draw raises after the others ran."""
    seed_sets = list(seed_sets or DEFAULT_SEED_SETS)
    results: dict[str, str] = {}
    failed: list[str] = []
    if parallel:
        futures = {s: draw_task.submit(s, precision, profile, checkout, keep, replace) for s in seed_sets}
        for future in futures.values():
            future.wait()
        states = {s: f.state for s, f in futures.items()}
    else:
        states = {s: draw_task(s, precision, profile, checkout, keep, replace, return_state=True) for s in seed_sets}
    for seed_set, state in states.items():
        if state.is_completed():
            results[seed_set] = state.result()
        else:
            failed.append(seed_set)
    if failed:
        raise DrawFailed(f"draws failed: {', '.join(failed)} (their task logs say why; run the flow again to resume)")
    return results
