"""rankstream: learning image rankings from a live stream of relevance feedback.

This folder holds the top: the CLI (`cli`, `commands/`, one module per command word), the
embedded demos (`demo_pipeline`, `click_demo`, `click_history`), the offline evaluations
(`evals/`), and plots and tables. The other folders install as its subpackages:
`ranking`, `simulators`, `stream`, `telemetry`, `producers`, `selection`, `workers`,
`serve`, `harness`, `deploy` (pyproject.toml's package-dir).
"""

__version__ = "0.1.0"
