"""The names every package shares: the team's roles, the two workflows, the token sources
of docs/method.md §4, and the seven evaluation datasets of docs/method.md §7."""

from __future__ import annotations

ROLES: tuple[str, ...] = ("leader", "searcher", "answerer")
WORKFLOWS: tuple[str, ...] = ("cascade", "hierarchy")
SOURCES: tuple[str, ...] = ("generated", "observation", "padding")
DATASETS: tuple[str, ...] = ("nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle")
