"""What verl imports in each of its processes when VERL_USE_EXTERNAL_MODULES names this module
(the launch command sets it): the `multiagent_opd` estimator, the `multiagent_opd_team` agent
loop and, where verl's TransferQueue is installed (the GPU image), the `maopd_sync` trainer."""

from __future__ import annotations

import importlib.util

import pipeline.rl.advantages
import pipeline.verl_agent.loop

V1_TRAINER = importlib.util.find_spec("transfer_queue") is not None
if V1_TRAINER:
    import pipeline.verl_agent.v1_trainer  # noqa: F401  registers trainer_mode maopd_sync
