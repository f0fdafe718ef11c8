"""Users who click instead of judging: the records an engine logs for them.

An engine that feeds rankstream clicks serves a ranking (`/v1/rank` logs it as an
`Impression`: the candidates in displayed order with their phi) and later posts what
its user clicked (`/v1/clicks`: one `Click` per clicked candidate, then the "session
over" row, `Click.no_click`, which alone means "shown, nothing clicked").
`impression_and_clicks` plays both sides for a simulated user: it shows the top
`display` of a served ranking (the champion's, or an interleaved list with its teams,
`selection.click_race`), lets a click model (`simulators.click_models`) click by the
ground-truth grades, and returns exactly those records (`stream.click_schema`; the
impression made by `producers.impression_producer.served_impression`, as serve makes it), so what
learns from them (the click join, PDGD) sees what an engine would send and nothing more:
no grade leaves this module.

`feedback_users` reads the `--feedback judged|clicks:<model>` option of `rankstream
simulate`: None for judged feedback (the paper's setting), else the click model, with
the collections' three grades.

>>> import numpy as np
>>> from rankstream.simulators.judged_feedback import RetrievedQuery
>>> query = RetrievedQuery(7, 1, np.array([10, 11, 12]), np.eye(3, dtype=np.float32),
...                        np.array([0, 2, 0], dtype=np.int8))
>>> impression, clicks = impression_and_clicks(
...     query, np.array([1, 2, 0]), feedback_users("clicks:perfect"),
...     np.random.default_rng(0), served_by="uni_con", version=1, model_versions={"uni_con": 1},
...     time=0.0, display=2)
>>> impression.candidate_ids.tolist(), [(c.candidate_id, c.position) for c in clicks]
([11, 12], [(11, 1), (None, None)])
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import numpy as np

from rankstream.producers.impression_producer import served_impression
from rankstream.simulators.click_feedback import DEFAULT_DISPLAY, RELEVANCE_GRADES
from rankstream.simulators.click_models import ClickModel, click_model, feedback_click_model
from rankstream.simulators.judged_feedback import RetrievedQuery
from rankstream.stream.click_schema import Click, Impression


def feedback_users(feedback: str) -> ClickModel | None:
    """None for "judged"; the click model of "clicks:<model>", for the collections'
    grades (ValueError otherwise: `simulators.click_models.feedback_click_model`)."""
    name = feedback_click_model(feedback)
    return None if name is None else click_model(name, RELEVANCE_GRADES)


def impression_id(rng: np.random.Generator) -> str:
    """A uuid4 hex drawn from `rng`: unique like the server's, reproducible under a seed."""
    return uuid.UUID(bytes=rng.bytes(16), version=4).hex


def impression_and_clicks(
    query: RetrievedQuery,
    order: np.ndarray,
    users: ClickModel,
    rng: np.random.Generator,
    *,
    served_by: str,
    version: int,
    model_versions: Mapping[str, int],
    time: float,
    display: int = DEFAULT_DISPLAY,
    teams: np.ndarray | None = None,
    team_models: tuple[str, ...] = (),
    intervention: str | None = None,
    shown_probability: float | None = None,
    engine_scores: np.ndarray | None = None,
) -> tuple[Impression, list[Click]]:
    """The impression of `query` served in `order` (indices into its candidates, best
    first; its top `display` shown) and the clicks a user of the click model `users`
    makes on it (module docstring). An interleaved list gives its `teams` (per position
    of `order`) and `team_models`; a randomized or sampled one its `intervention` and
    `shown_probability` (`selection.scoring.logged_order`); an engine with a ranking of
    its own its `engine_scores` (one per candidate of `query`, logged for those shown).
    `rng` draws the impression id and the clicks."""
    order = np.asarray(order)
    n = len(query.candidate_ids)
    if order.ndim != 1 or not np.issubdtype(order.dtype, np.integer):
        raise ValueError(f"order must be a 1-d array of candidate indices, got {order.shape}")
    if order.size and (order.min() < 0 or order.max() >= n or len(np.unique(order)) < len(order)):
        raise ValueError(f"order must list candidates 0..{n - 1} at most once each")
    if display < 1:
        raise ValueError(f"display must be >= 1, got {display}")
    if teams is not None and np.shape(teams) != order.shape:
        raise ValueError(f"need one team per position of order {order.shape}")
    shown = order[:display]
    impression = served_impression(
        impression_id(rng),
        query.candidate_ids,
        query.phi,
        shown,
        served_by,
        version,
        model_versions,
        time=time,
        query_id=query.query_id,
        teams=None if teams is None else np.asarray(teams, dtype=np.int8)[:display],
        team_models=team_models,
        intervention=intervention,
        shown_probability=shown_probability,
        engine_scores=engine_scores,
    )
    clicked = users.clicks(query.relevance[shown].astype(np.int64), rng)
    clicks = [
        Click(impression.impression_id, int(query.candidate_ids[shown[k]]), k + 1, time)
        for k in np.flatnonzero(clicked).tolist()
    ]
    # the simulated user's session is over once it has clicked: the "session over" row
    # lets the click join close it at once instead of waiting out its window
    return impression, [*clicks, Click.no_click(impression.impression_id, time)]
