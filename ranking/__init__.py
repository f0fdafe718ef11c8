"""The learners and models, and how they are measured: online rankers, cMDS-DML, RankMKL
and their batch fits (`batch_models`), NDCG (`metrics`), the interleaving algorithm, the
sequential tests. Knows nothing of Kafka, Redis or Prometheus.

`DEFAULT_PHI_DIM` lives here, with no import at all, because three layers share it:
the simulator's width, the deployment's default (`stream.settings`, which must stay
numpy-free) and the width a model stored before widths were configurable has; the meta
key a width is stored under (`WIDTH_KEY`) beside it. The
propensity interventions' names live here for the same reason: `ranking.propensity`
makes them, `stream.settings` lets a deployment choose one (`RANKSTREAM_INTERVENTION`).
PDGD's default learning rate too: `ranking.learners` declares it (numpy-free) and
`ranking.pdgd` is its constructor's default, and neither may import the other.
"""

# The paper's phi: 9 descriptors x 4 similarity measures, as many as the synthetic
# collection's `feature_names` (tests/test_feedback.py checks); a constant, because
# counting the measures would import numba.
DEFAULT_PHI_DIM = 36
# The meta key a stored model's width is written under: the batch fits
# (`ranking.batch_models`) stamp it, `stream.store` reads it back.
WIDTH_KEY = "phi_dim"

# The randomized logging policies `ranking.propensity.randomize` makes: the top shown
# shuffled (RandTop-n, serve's default: the first) or ranks 1 and k swapped.
SHUFFLE, SWAP = "shuffle", "swap"
INTERVENTIONS = (SHUFFLE, SWAP)

# PDGD's learning rate unless told otherwise. The reference code's 0.1 (Oosterhuis,
# github.com/HarrieO/OnlineLearningToRank) steps on per-query min-max normalised features
# (LETOR's); on rankstream's standardised phi a shown top 10 differs ~3.1x as much per
# feature (Fashion-MNIST: 0.353 against 0.113), so 0.1 is a ~3x larger step here. 0.02 was
# chosen on validation seeds 100-104 (docs/results/clicks.md): the best mean final
# gain over the four simulated user models and the smallest spread of 0.1, 0.05, 0.02, 0.01.
PDGD_LEARNING_RATE = 0.02
