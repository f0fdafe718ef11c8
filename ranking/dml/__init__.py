"""Ordinal distance metric learning: cMDS-DML, the LDMLR baseline, and kNN regression.

All three are scikit-learn estimators; the transformers take (X, r) with ordinal labels r.
"""

from rankstream.ranking.dml.cmds_dml import CMDSDML
from rankstream.ranking.dml.knn import OrdinalKNNRegressor
from rankstream.ranking.dml.ldmlr import LDMLR

__all__ = ["CMDSDML", "LDMLR", "OrdinalKNNRegressor"]
