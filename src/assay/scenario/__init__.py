"""Scenarios (FDE-Gym case folders): the per-run environment, grading and rules text.

Kept light on purpose: `python -m assay.scenario.grading` (the grade worker) imports this
package, and must start fast. Import `assay.scenario.session.ScenarioSession` directly.
"""
