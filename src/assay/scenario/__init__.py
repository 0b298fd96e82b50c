"""Scenarios (FDE-Gym case folders and native scenarios): one run's lifecycle
(`lifecycle.ScenarioRun`), grading its delivered system (`grading`), the grading worker
process (`worker`) and the rules text (`rules`).

Kept light on purpose: `python -m assay.scenario.worker` imports this package and must
start fast.
"""
