"""The click demo: `run_click_demo` and its report (`ClickDemoResult.report()` is the
click demo's DIR/report.json).

`rankstream demo --feedback clicks:MODEL` runs the embedded pipeline
(`rankstream.demo_pipeline`, `DemoOptions.feedback`) with users who click and send no
judgment: the click join's interleaving race (`selection.click_race`) is the only thing
that can move the champion. What it records, impression by impression, is
`rankstream.click_history.ClickHistory`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.click_history import ClickHistory, rounded_mean
from rankstream.demo_pipeline import DemoOptions, run_pipeline
from rankstream.simulators.images import CandidateRetriever, ImageCollection
from rankstream.stream.settings import Settings

TRUE_NDCG_NOTE = (
    "the simulator's measurement from the collection's ground truth, never sent to the "
    "system: the system saw only impressions and clicks"
)


@dataclass
class ClickDemoResult:
    """One click demo run: its history and counts; `report()` is DIR/report.json."""

    options: DemoOptions
    collection: str
    images: int
    seconds: float
    cpu_seconds: float
    collection_seconds: float
    history: ClickHistory
    settings: dict[str, Any]  # the interleaving settings of the run
    judged: dict[str, int]  # what reached the judged side: nothing
    join: dict[str, Any]  # the click join's counters
    learned_triplets: int  # triplets the online worker learned (every one the join's)
    learning_seconds: dict[str, np.ndarray]
    refits: int
    first_call: dict[str, float]
    engine: dict[str, Any] = dataclasses.field(default_factory=dict)  # its ranker, true NDCG

    @property
    def queries(self) -> int:
        return self.history.impressions

    def report(self) -> dict[str, Any]:
        history = self.history
        impressions, clicks = history.impressions, int(sum(history.clicks))
        clicked = sum(1 for c in history.clicks if c)
        served: dict[str, int] = {}
        for name in history.served_by:
            served[name] = served.get(name, 0) + 1
        spells = history.spell_report()
        switches = [s for s in spells if "decided_at_impression" in s]
        return {
            "feedback": self.options.feedback,
            "collection": self.collection,
            "images": self.images,
            "seed": self.options.seed,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "collection_seconds": round(self.collection_seconds, 2),
            "impressions": impressions,
            "interleaved_impressions": int(sum(history.interleaved)),
            **self.settings,
            "clicks": clicks,
            "click_through_rate": round(clicked / impressions, 4) if impressions else None,
            "clicks_per_impression": round(clicks / impressions, 4) if impressions else None,
            "judged": self.judged,
            "join": self.join,
            "learned_triplets": self.learned_triplets,
            "champion": history.champion,
            "champion_switches": len(switches),
            "champions": spells,
            "interleaving": history.race(),
            "true_ndcg_at_50": {
                "note": TRUE_NDCG_NOTE,
                "shown": rounded_mean(np.asarray(history.shown_ndcg)),
                "before_first_switch": spells[0]["true_ndcg_at_50_shown"],
                "after_last_switch": spells[-1]["true_ndcg_at_50_shown"] if switches else None,
            },
            "served_by": dict(sorted(served.items())),
            **self.engine,
            "learning_seconds": {
                m: round(float(v[-1]), 4) if len(v) else 0.0
                for m, v in self.learning_seconds.items()
            },
            "learners_first_call": self.first_call,
            "refits": self.refits,
            "options": dataclasses.asdict(self.options),
        }


def run_click_demo(
    options: DemoOptions,
    settings: Settings | None = None,
    *,
    collection: ImageCollection | None = None,
    index: CandidateRetriever | None = None,
    progress: bool = True,
) -> ClickDemoResult:
    """The click demo (`options.feedback` "clicks:<model>"; module docstring): no
    judgment sent, the interleaving race moves the champion; collect its history."""
    if not options.clicks:
        raise ValueError("the click demo needs feedback clicks:<model>; judged is run_demo")
    run = run_pipeline(options, settings, collection, index, progress)
    pipeline = run.pipeline
    assert pipeline.join is not None and pipeline.clicks is not None
    simulation, join = pipeline.simulation.handler, pipeline.join.handler
    counters = join.counters.to_json()
    return ClickDemoResult(
        options=options,
        collection=run.collection.name,
        images=run.collection.n_images,
        seconds=run.seconds,
        cpu_seconds=run.cpu_seconds,
        collection_seconds=run.collection_seconds,
        history=pipeline.clicks,
        settings={
            "interleaving_share": pipeline.settings.interleaving_share,
            "interleaving_method": pipeline.settings.interleaving_method,
            "test": join.policy.describe(),
        },
        judged={  # nothing judged reached the system: no judged query, no judged triplet
            "queries_sent": sum(
                pipeline.transport.end_offsets(pipeline.settings.queries_topic).values()
            ),
            "triplets_sent": simulation.triplets_produced,
        },
        join={
            k: counters[k] for k in ("sessions", "triplets", "dead_letters", "stale_interleavings")
        },
        learned_triplets=pipeline.online.counters.records,
        learning_seconds=pipeline.clock.arrays(),
        refits=pipeline.batch.counters.refits,
        first_call=pipeline.first_call,
        engine=simulation.engine_summary(),
    )
