"""Each name has one home: learners are named only by ranking/learners.py, and no module
constant is defined again, with the same value, in another module.

Read from the sources (no import): a learner's name written as a string outside
`ranking/` is a second list of learners that a new learner would not reach; a constant
set twice is two places that must change together.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from rankstream.ranking import learners

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ranking", "stream", "workers", "serve", "simulators", "harness", "rankstream")
CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def learner_names_in(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, literal) of every string in the code (docstrings aside) that is a learner's
    name, or a short phrase holding one ("opar1 ips")."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings or len(node.value) > 40:
                continue
            if set(node.value.split()) & names:
                found.append((node.lineno, node.value))
    return sorted(found)


def module_constants(source: str) -> dict[str, str]:
    """Module-level UPPER_CASE names set to a literal, with the literal's repr."""
    constants = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        try:
            literal = repr(ast.literal_eval(value))
        except ValueError:
            continue  # computed from other names: not a second definition
        for target in targets:
            if isinstance(target, ast.Name) and CONSTANT.fullmatch(target.id):
                constants[target.id] = literal
    return constants


def test_no_learner_is_named_outside_ranking() -> None:
    names = set(learners.names())
    outside = [folder for folder in PACKAGES if folder != "ranking"]
    spelled = [
        f"{path.relative_to(ROOT)}:{line}: {literal!r}"
        for path in _sources(*outside)
        for line, literal in learner_names_in(path.read_text(encoding="utf-8"), names)
    ]
    assert not spelled, "read ranking/learners.py instead:\n" + "\n".join(spelled)


# An engine nobody here wrote, on purpose: it reaches serve over HTTP only and imports
# nothing of rankstream (tests/test_http_click_engine.py checks that), so the model names it
# sends are its own copy of the API's, as any outside engine's are.
OUTSIDE_ENGINES = {ROOT / "harness" / "http_click_engine.py"}


def test_no_constant_is_defined_twice_with_the_same_value() -> None:
    homes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in _sources(*PACKAGES):
        if path in OUTSIDE_ENGINES:
            continue
        for name, literal in module_constants(path.read_text(encoding="utf-8")).items():
            homes[name, literal].append(str(path.relative_to(ROOT)))
    twice = {
        f"{name} = {literal}": where for (name, literal), where in homes.items() if len(where) > 1
    }
    assert not twice, f"import these from one module: {twice}"


def test_the_scans_find_what_they_look_for() -> None:
    code = (
        '"""A docstring naming opar1 is fine."""\nLEARNERS = ("opar1", "arow")\nX = "opar1 ips"\n'
    )
    found = [(2, "arow"), (2, "opar1"), (3, "opar1 ips")]  # by line, then literal
    assert learner_names_in(code, {"opar1", "arow"}) == found
    assert module_constants("K = 300\nJ: int = K\nname = 'x'\nN = -1\n") == {"K": "300", "N": "-1"}
