"""The step-size codes of the four linear rules (Gao et al., IJCAI 2015).

The compiled linear kernel (`ranking.kernels._step_size`) switches on these codes, and
each linear learner's spec (`ranking.learners`) names its code; numba's on-disk cache
cannot key a kernel that takes a compiled function as an argument, hence codes.
"""

OPR_RULE = 0  # eq. (1): a full step on a mistake (a zero margin included)
OPAR1_RULE = 1  # eqs. (4)-(5): min(C, l / |x|^2)
OPAR2_RULE = 2  # the lambda_t after eq. (5): l / (|x|^2 + 1/(2C))
OGDR_RULE = 3  # eq. (7): eta while the hinge loss is positive
