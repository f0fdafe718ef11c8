"""Storing a scikit-learn estimator's constructor arguments: one rule for every estimator here.

scikit-learn's contract is that `__init__` keeps each argument, unchanged, as the
attribute of the same name (checks wait for `fit`), because `get_params`, `clone` and
grid searches read them back by the signature's names. Written out, that is every name
twice; `keep_init_params(locals())` as the first line of `__init__` keeps the signature
the one list of names.
"""

from __future__ import annotations

from collections.abc import Mapping


def keep_init_params(given: Mapping[str, object]) -> None:
    """Set each of `__init__`'s arguments on `given["self"]` under its own name.

    `given` is `locals()` taken before `__init__` binds anything else, so it holds exactly
    `self` and the arguments.
    """
    estimator = given["self"]
    for name, value in given.items():
        if name not in ("self", "__class__"):  # __class__: present when the body uses super()
            setattr(estimator, name, value)
