"""Ranking algorithms and metrics. Knows nothing of Kafka, Redis or Prometheus.

`DEFAULT_PHI_DIM` lives here, with no import at all, because three layers share it:
the simulator's width, the deployment's default (`stream.settings`, which must stay
numpy-free) and the width a model stored before widths were configurable has.
"""

# The paper's phi: 9 descriptors x 4 similarity measures, as many as the synthetic
# collection's `feature_names` (tests/test_feedback.py checks); a constant, because
# counting the measures would import numba.
DEFAULT_PHI_DIM = 36
