"""RankMKL: multiple kernel learning for ranking (Sharaf, Hussein & Ismail, BMVC 2015).

`base_kernels` builds the per-group base kernels, `solver` the RankSVM dual and the GMKL weight
updates in the n-dimensional form, `model` the scikit-learn estimator that ties them
together (preference pairs come from `rankstream.ranking.pairs`).
"""

from rankstream.ranking.mkl.model import RankMKL, concat_groups

__all__ = ["RankMKL", "concat_groups"]
