"""verl's V1 synchronous trainer with the team's advantage and the paper's minibatch count.

Registered as trainer_mode `maopd_sync` (configs/verl/maopd_base.yaml). It needs verl's
TransferQueue package (verl's `verl-core` extra, not installed here); pipeline.verl_agent.plugin
imports this module when TransferQueue is importable. It has NEVER RUN: no GPU, Ray cluster or
TransferQueue here (docs/verl.md); the advantage it writes is tested on CPU through
`fields_advantages` on the fields verl's V1 agent-loop worker stores. Two changes to verl's
PPOTrainerSync:

- `_compute_advantage`: verl passes a registered estimator only token_level_rewards,
  response_mask, index and config. We read each row's prompt, response, response_mask,
  rollout log-probs and extra fields from TransferQueue and let pipeline.verl_agent.advantage
  compute the advantages (the registered `multiagent_opd` estimator over the whole batch).
  Rows verl added as padding (tag is_padding; they copy a real row's extra fields) get 0.
- minibatches: verl's split size is ppo_mini_batch_size x rollout.n rows, but a step here has a
  variable number of rows (one per model call). The batch is padded to a multiple of
  dp_size x n_minibatches and split into exactly n_minibatches (params.yaml
  common.optim.n_minibatches = 5) optimizer updates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import transfer_queue as tq
from tensordict import TensorDict
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

from pipeline.verl_agent.advantage import fields_advantages
from pipeline.verl_agent.agent_file import stage_train_config

TRAINER_NAME = "maopd_sync"
FIELDS = ["prompts", "responses", "response_mask", "rollout_log_probs", "extra_fields"]


@register_trainer(TRAINER_NAME)
class MultiAgentOPDTrainer(PPOTrainerSync):
    @property
    def n_minibatches(self) -> int:
        if not hasattr(self, "_n_minibatches"):
            self._n_minibatches = stage_train_config(self.config).optim.n_minibatches
        return self._n_minibatches

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        return dp_size * self.n_minibatches

    @contextlib.contextmanager
    def _minibatch_rows(self, rows: int) -> Iterator[None]:
        """verl reads ppo_mini_batch_size x rollout.n; make that `rows` for one update."""
        actor, rollout = self.config.actor_rollout_ref.actor, self.config.actor_rollout_ref.rollout
        saved = actor.ppo_mini_batch_size, rollout.n
        actor.ppo_mini_batch_size, rollout.n = rows, 1
        try:
            yield
        finally:
            actor.ppo_mini_batch_size, rollout.n = saved

    def _update_actor(self, batch, metrics: dict):
        with self._minibatch_rows(len(batch) // self.n_minibatches):
            return super()._update_actor(batch, metrics)

    def _compute_advantage(self, batch, metrics: dict):
        fields = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=FIELDS)
        advantages = fields_advantages(fields, list(batch.tags))
        metrics["maopd/advantage_abs_max"] = float(advantages.values().abs().max())
        output = TensorDict({"advantages": advantages, "returns": advantages}, batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)
