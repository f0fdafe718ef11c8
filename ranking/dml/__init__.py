"""Ordinal distance metric learning: cMDS-DML, the LDMLR baseline, and kNN regression.

All three are scikit-learn estimators; the transformers take (X, r) with ordinal labels r.
"""

from ranking.dml.cmds_dml import CMDSDML
from ranking.dml.knn import OrdinalKNNRegressor
from ranking.dml.ldmlr import LDMLR

__all__ = ["CMDSDML", "LDMLR", "OrdinalKNNRegressor"]
