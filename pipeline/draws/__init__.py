"""Draws: one full run of the recipe under a seed set, a CPU kind and a precision path.

`identity` names a draw (seed set, CPU kind, precision, code fingerprint), `seed_sets` reads and
applies configs/seed_sets.yaml, `workspace` runs a draw in its own checkout copy, and `record`
is a draw's record (reports/<profile>/draw.json and the kept ones) and the checks on kept records.
"""
