"""Agents: the action protocol, role prompts, the cascade and hierarchy workflows, trajectory records."""

from pipeline.agents.records import to_tables, trajectory_table
from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.agents.workflows import run_cascade, run_hierarchy, run_workflow

__all__ = ["WorkflowConfig", "run_cascade", "run_hierarchy", "run_workflow", "to_tables", "trajectory_table"]
