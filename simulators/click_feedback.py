"""What the click experiments share about showing results to clicking users.

An impression shows the top `DEFAULT_DISPLAY` (50) candidates of an engine's ranking;
the simulated user (`simulators.click_models`) clicks by the ground-truth grades of what is
shown. Nothing here learns: learning from clicks is the product's (the click join and
the online worker, `workers.click_join`, `workers.online_worker`), and `eval clicks` measures
it through them (`rankstream.evals.click_deployment`).

Grades: the collections grade relevance 0, 1, 2 (`simulators.images.ImageCollection`),
so the click models' three-grade tables apply.
"""

from __future__ import annotations

import numpy as np

from rankstream.simulators.judged_feedback import JUDGED

RELEVANCE_GRADES = 3  # the collections' grades 0, 1, 2
DEFAULT_DISPLAY = JUDGED  # results shown per impression: the judged depth and NDCG@50's
DEFAULT_INTERVENTION_SHARE = 0.05
"""The share of rankings the click experiments' serve randomizes
(`RANKSTREAM_INTERVENTION_SHARE`, off by default in a deployment): the join's propensity
estimate reads them back."""
CLICK_DEPTH = 3
"""The judged arms' control depth ("<learner> judged@3"): judgments of only the top 3
shown, about as deep as cascade users read (an informational user's last click is at
rank 2.5 on average, README "Learning from clicks"): what judged feedback gives where
the clicks are."""


def order_scores(order: np.ndarray, n: int) -> np.ndarray:
    """Scores (n,) whose `ranked_order` starts with `order` (the rest keep their order)."""
    scores = np.zeros(n)
    scores[order] = np.arange(n, n - order.shape[0], -1, dtype=np.float64)
    return scores
