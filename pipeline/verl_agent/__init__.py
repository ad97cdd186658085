"""The paper profile on verl: a registered multi-agent agent loop, its per-call samples, the
Stage-II advantage inside verl's trainer, the Hydra configs and the launch command.

Modules (import the ones you need; nothing heavy happens here):
  sampling     per-entry seeds, and the in-process backend with the same seed semantics
  server       a PolicyBackend over verl's async LLM server client (the rollout replicas)
  trajectory   one question, one trajectory: workflow, tables, Teacher, judge, rewards
  outputs      tables <-> verl AgentLoopOutputs / verl batches (one sample per model call)
  loop         the agent loop registered with verl as `multiagent_opd_team`
  advantage    advantages of a verl batch with the registered `multiagent_opd` estimator
  agent_file   verl's agent-loop file: the stage's settings for the loop and the trainer
  datasets     data/splits -> verl's RL parquet files
  configs      the stage configs of configs/verl/, composed over verl's ppo_trainer defaults
  launch       the verl main_ppo command line of one stage
  plugin       what VERL_USE_EXTERNAL_MODULES imports inside verl's processes
  v1_trainer   verl's V1 sync trainer with our advantage and minibatch count (needs TransferQueue)
See docs/verl.md.
"""
