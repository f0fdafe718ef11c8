"""RankMKL: multiple kernel learning for ranking (Sharaf, Hussein & Ismail, BMVC 2015).

`kernels` builds the per-group base kernels, `solver` the RankSVM dual and the GMKL weight
updates in the n-dimensional form, `model` the estimator that ties them together.
"""

from rankstream.ranking.mkl.model import RankMKL, check_pairs

__all__ = ["RankMKL", "check_pairs"]
