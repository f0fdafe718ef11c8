"""The reference pages name everything the code has: settings, metrics and routes.

A setting added to `stream/settings.py`, a Prometheus metric declared in the code, or a
route added to `serve`'s app fails here until docs/reference/ documents it; one documented
there and gone from the code fails too. (The CLI reference and the route table are
generated from the code when the site is built, `docs/hooks/generated.py`; the settings'
meanings, the metrics' and the routes' sections are written by hand, so they are checked.)
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from rankstream.stream.settings import ENV_PREFIX, VARIABLES, Settings

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def default_text(field: dataclasses.Field) -> str:
    """A setting's default as the settings page writes it (unset: no default)."""
    if field.default_factory is not dataclasses.MISSING:
        return f"`{field.default_factory().replace(os.path.expanduser('~'), '~')}`"
    if field.default is None:
        return "unset"
    if isinstance(field.default, bool):
        return "`on`" if field.default else "`off`"
    return f"`{field.default}`"


def settings_rows(text: str) -> dict[str, str]:
    """variable -> its default cell, from the settings page's table rows."""
    return dict(re.findall(r"^\| `(RANKSTREAM_[A-Z0-9_]+)` \| ([^|]+?) \| [^|]+\|$", text, re.M))


def undocumented_settings(text: str) -> list[str]:
    """What is wrong with the page against `VARIABLES`: missing, stale or wrong defaults."""
    rows = settings_rows(text)
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    problems = []
    for field_name, (name, _check) in VARIABLES.items():
        variable = ENV_PREFIX + name
        if variable not in rows:
            problems.append(f"{variable}: in stream/settings.py, not in the settings reference")
        elif rows[variable] != default_text(fields[field_name]):
            problems.append(
                f"{variable}: default {rows[variable]} in the reference, "
                f"{default_text(fields[field_name])} in the code"
            )
    known = {ENV_PREFIX + name for name, _check in VARIABLES.values()}
    problems += [f"{v}: in the settings reference, not in the code" for v in rows if v not in known]
    return problems


def test_every_setting_is_in_the_reference_with_its_default() -> None:
    text = (REFERENCE / "settings.md").read_text(encoding="utf-8")
    problems = undocumented_settings(text)
    assert not problems, "docs/reference/settings.md:\n" + "\n".join(problems)


def test_the_settings_check_fails_on_a_missing_or_wrong_row() -> None:
    text = (REFERENCE / "settings.md").read_text(encoding="utf-8")
    before = undocumented_settings(text)  # [] unless the page is out of date already

    def added(page: str) -> list[str]:
        return [problem for problem in undocumented_settings(page) if problem not in before]

    dropped = re.sub(r"^\| `RANKSTREAM_PHI_DIM` .*\n", "", text, flags=re.M)
    assert added(dropped) == [
        "RANKSTREAM_PHI_DIM: in stream/settings.py, not in the settings reference"
    ]
    wrong = text.replace("| `RANKSTREAM_API_PORT` | `8000` |", "| `RANKSTREAM_API_PORT` | `80` |")
    assert added(wrong) == [
        "RANKSTREAM_API_PORT: default `80` in the reference, `8000` in the code"
    ]


DECLARATION = re.compile(r"\b(Counter|Gauge|Histogram|Summary)\(\s*\"rankstream_")


def declared_metrics() -> dict[str, str]:
    """Every `rankstream_*` metric a product module declares: name as exported -> type.

    Found by reading the sources for declarations, then importing those modules, so a
    metric declared anywhere (not only in the metrics module) is seen."""
    declaring = set()
    for folder in ("ranking", "simulators", "stream", "workers", "serve", "rankstream",
                   "telemetry", "producers", "selection"):  # fmt: skip
        for path in (ROOT / folder).rglob("*.py") if (ROOT / folder).is_dir() else ():
            if DECLARATION.search(path.read_text(encoding="utf-8")):
                parts = path.relative_to(ROOT).with_suffix("").parts
                package = () if parts[0] == "rankstream" else ("rankstream",)
                declaring.add(".".join((*package, *parts)))
    assert declaring, "no module declares a rankstream_ metric: the scan is broken"
    found = {}
    for name in sorted(declaring):
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase) and value._name.startswith("rankstream_"):
                suffix = "_total" if value._type == "counter" else ""
                found[value._name + suffix] = value._type
    return found


def documented_metrics(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\| `(rankstream_[a-z0-9_]+)` \| (\w+) \|", text, re.M))


def test_every_metric_is_in_the_reference_and_only_those() -> None:
    text = (REFERENCE / "metrics.md").read_text(encoding="utf-8")
    code, page = declared_metrics(), documented_metrics(text)
    missing = sorted(set(code) - set(page))
    stale = sorted(set(page) - set(code))
    wrong = sorted(n for n in set(code) & set(page) if code[n] != page[n])
    assert not (missing or stale or wrong), (
        f"docs/reference/metrics.md: missing {missing}, not in the code {stale}, wrong type {wrong}"
    )


def app_routes() -> set[tuple[str, str]]:
    """(METHOD, path) of every route `serve` answers, HEAD aside (Starlette adds it)."""
    from rankstream.serve.app import ROUTES

    return {
        (method, path)
        for path, (_handler, methods, _public) in ROUTES.items()
        for method in methods
        if method != "HEAD"
    }


def test_every_route_has_its_section_and_the_openapi_document_agrees() -> None:
    from rankstream.serve.openapi import openapi_document

    text = (REFERENCE / "http-api.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^## (GET|POST|PUT|DELETE|PATCH) (/\S*)$", text, re.M))
    document = {
        (method.upper(), path)
        for path, operations in openapi_document(Settings().phi_dim)["paths"].items()
        for method in operations
    }
    routes = app_routes()
    assert routes == document, f"the app and /openapi.json differ: {routes ^ document}"
    assert sections == routes, (
        f"docs/reference/http-api.md: no section for {sorted(routes - sections)}, "
        f"sections for no route {sorted(sections - routes)}"
    )
