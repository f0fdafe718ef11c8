"""Users who click instead of judging: the records an engine logs for them.

An engine that feeds rankstream clicks serves a ranking (`/v1/rank` logs it as an
`Impression`: the candidates in displayed order with their phi) and later posts what
its user clicked (`/v1/clicks`: one `Click` per clicked candidate, then the "session
over" row, `Click.no_click`, which alone means "shown, nothing clicked").
`impression_and_clicks` plays both sides for a simulated user: it shows the top
`display` of a served ranking, lets a click model (`simulators.clicks`) click by the
ground-truth grades, and returns exactly those
records (`stream.click_schema`), so what learns from them (the click join, PDGD) sees
what an engine would send and nothing more: no grade leaves this module.

`feedback_users` reads the `--feedback judged|clicks:<model>` option of `rankstream
simulate`: None for judged feedback (the paper's setting), else the click model, with
the collections' three grades.

>>> import numpy as np
>>> from rankstream.simulators.feedback import RetrievedQuery
>>> query = RetrievedQuery(7, 1, np.array([10, 11, 12]), np.eye(3, dtype=np.float32),
...                        np.array([0, 2, 0], dtype=np.int8))
>>> impression, clicks = impression_and_clicks(
...     query, np.array([0.1, 0.9, 0.5]), feedback_users("clicks:perfect"),
...     np.random.default_rng(0), served_by="uni_con", version=1, model_versions={"uni_con": 1},
...     time=0.0, display=2)
>>> impression.candidate_ids.tolist(), [(c.candidate_id, c.position) for c in clicks]
([11, 12], [(11, 1), (None, None)])
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import numpy as np

from rankstream.ranking.metrics import ranked_order
from rankstream.simulators.click_feedback import DEFAULT_DISPLAY, RELEVANCE_GRADES
from rankstream.simulators.clicks import ClickModel, click_model, feedback_click_model
from rankstream.simulators.feedback import RetrievedQuery
from rankstream.stream.click_schema import Click, Impression
from rankstream.workers.interleaved import InterleavedList


def feedback_users(feedback: str) -> ClickModel | None:
    """None for "judged"; the click model of "clicks:<model>", for the collections'
    grades (ValueError otherwise: `simulators.clicks.feedback_click_model`)."""
    name = feedback_click_model(feedback)
    return None if name is None else click_model(name, RELEVANCE_GRADES)


def impression_id(rng: np.random.Generator) -> str:
    """A uuid4 hex drawn from `rng`: unique like the server's, reproducible under a seed."""
    return uuid.UUID(bytes=rng.bytes(16), version=4).hex


def impression_and_clicks(
    query: RetrievedQuery,
    scores: np.ndarray,
    users: ClickModel,
    rng: np.random.Generator,
    *,
    served_by: str,
    version: int,
    model_versions: Mapping[str, int],
    time: float,
    display: int = DEFAULT_DISPLAY,
    interleaved: InterleavedList | None = None,
) -> tuple[Impression, list[Click]]:
    """The impression of `query` ranked by `scores` (its top `display`) and the clicks a
    user of the click model `users` makes on it (module docstring); `rng` draws the
    impression id and the clicks. With `interleaved` (the champion's ranking drafted
    with challengers, `workers.interleaved`; `scores` are the champion's), the user sees
    the top `display` of the merged list and the impression records its teams."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != query.candidate_ids.shape:
        raise ValueError(f"need one score per candidate {query.candidate_ids.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    if display < 1:
        raise ValueError(f"display must be >= 1, got {display}")
    shown = ranked_order(scores)[:display]
    teams: dict = {}
    if interleaved is not None:
        shown = interleaved.order[:display]
        teams = {"teams": interleaved.teams[:display], "team_models": interleaved.team_models}
    impression = Impression(
        impression_id=impression_id(rng),
        time=time,
        model=served_by,
        version=version,
        model_versions=model_versions,
        candidate_ids=query.candidate_ids[shown],
        phi=query.phi[shown],
        query_id=query.query_id,
        **teams,
    )
    clicked = users.clicks(query.relevance[shown].astype(np.int64), rng)
    clicks = [
        Click(impression.impression_id, int(query.candidate_ids[shown[k]]), k + 1, time)
        for k in np.flatnonzero(clicked).tolist()
    ]
    # the simulated user's session is over once it has clicked: the "session over" row
    # lets the click join close it at once instead of waiting out its window
    return impression, [*clicks, Click.no_click(impression.impression_id, time)]
