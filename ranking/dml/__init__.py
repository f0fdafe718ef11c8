"""Ordinal distance metric learning: cMDS-DML (and its cross-validated form), the LDMLR
baseline, and kNN regression.

All are scikit-learn estimators; the transformers take (X, r) with ordinal labels r.
"""

from rankstream.ranking.dml.cmds_dml import CMDSDML
from rankstream.ranking.dml.cmds_dml_cv import CMDSDMLCV
from rankstream.ranking.dml.knn import OrdinalKNNRegressor
from rankstream.ranking.dml.ldmlr import LDMLR

__all__ = ["CMDSDML", "CMDSDMLCV", "LDMLR", "OrdinalKNNRegressor"]
