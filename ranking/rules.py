"""The codes the compiled kernels share with Python: step-size rules and status.

The compiled linear kernel (`ranking.kernels._step_size`) switches on the rule codes of
the four linear rules (Gao et al., IJCAI 2015), and each linear learner's spec
(`ranking.learners`) names its code; numba's on-disk cache cannot key a kernel that
takes a compiled function as an argument, hence codes. The status codes say which check
stopped a kernel's loop at its `bad_row`. Kept free of numba, so a caller of an
ahead-of-time build (`ranking.aot`) never imports it.
"""

OPR_RULE = 0  # eq. (1): a full step on a mistake (a zero margin included)
OPAR1_RULE = 1  # eqs. (4)-(5): min(C, l / |x|^2)
OPAR2_RULE = 2  # the lambda_t after eq. (5): l / (|x|^2 + 1/(2C))
OGDR_RULE = 3  # eq. (7): eta while the hinge loss is positive

# Kernel status codes: which check stopped the loop at `bad_row`.
OK, NONFINITE, BAD_LABEL = 0, 1, 2
