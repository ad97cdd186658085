"""verl's agent-loop file (`rollout.agent.agent_loop_config_path`): one entry per stage.

verl loads the file in every agent-loop worker and instantiates an entry by its `_target_`
with the entry's other keys as keyword arguments, so the entry carries the stage's settings
as literal values (no environment needed on the Ray workers). verl's trainer finds the same
entry through its own config (`agent_loop_config_path` + `default_agent_loop`), which is how
our trainer reads the stage's params.yaml numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pipeline.config import load_params
from pipeline.errors import InputError
from pipeline.io import write_text
from pipeline.rl.train_params import TrainConfig, train_config

LOOP_TARGET = "pipeline.verl_agent.loop.TeamAgentLoop"


def entry_name(system: str) -> str:
    """The agent-loop name of the training stage of `system` (distinct from the bare registered
    `multiagent_opd_team`)."""
    return f"maopd_{system}"


def agent_loop_entry(
    system: str,
    params_path: str | Path,
    profile: str,
    retriever_url: str,
    teacher_url: str | None = None,
    judge_url: str | None = None,
    send_seed: bool = False,
) -> dict[str, Any]:
    return {
        "name": entry_name(system), "_target_": LOOP_TARGET, "system": system, "params": str(params_path),
        "profile": profile, "retriever_url": retriever_url, "teacher_url": teacher_url, "judge_url": judge_url,
        "send_seed": bool(send_seed),
    }


def write_agent_loop_file(path: str | Path, entries: list[dict[str, Any]]) -> Path:
    path = Path(path)
    write_text(path, "# written by pipeline.verl_agent.launch; read by verl's agent-loop workers\n"
               + yaml.safe_dump(entries, sort_keys=False))
    return path


def read_entry(verl_config: Any) -> dict[str, Any]:
    """The entry of verl's `default_agent_loop` in its agent-loop file."""
    agent = verl_config.actor_rollout_ref.rollout.agent
    path, name = agent.agent_loop_config_path, agent.default_agent_loop
    if not path:
        raise InputError("actor_rollout_ref.rollout.agent.agent_loop_config_path: not set "
                         "(see pipeline.verl_agent.launch)")
    try:
        entries = yaml.safe_load(Path(path).read_text()) or []
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"{path}: cannot read the agent-loop file: {e}") from e
    found = [e for e in entries if isinstance(e, dict) and e.get("name") == name]
    if len(found) != 1:
        raise InputError(f"{path}: expected one entry named {name!r}, found {len(found)}")
    return found[0]


def stage_train_config(verl_config: Any) -> TrainConfig:
    """The params.yaml TrainConfig of the stage verl is running."""
    entry = read_entry(verl_config)
    return train_config(load_params(entry["params"], profile=entry["profile"]), entry["system"])
