"""The whole loop in one process: Uni-Con serves until a learned model beats it on the
paired test (`selection.judged_race`), then that one."""

from __future__ import annotations

from rankstream.ranking.baselines import UNI_CON
from rankstream.ranking.sequential import PairedTest
from rankstream.selection.judged_race import ChampionPolicy
from rankstream.simulators.collection import build_collection
from rankstream.simulators.retrieval import CandidateIndex
from rankstream.stream.connect import open_transport
from rankstream.stream.schema import decode_query
from rankstream.telemetry.prometheus_metrics import sample_value
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions
from rankstream.workers.simulator import SimulateOptions, Simulation

# The run is deterministic (fixed seeds, no timers): the paired test switches to ogdr at
# query 245 of this stream (per-query differences against Uni-Con spread ~0.13 NDCG@50),
# and after the 156 queries since, Uni-Con's upper bound against ogdr is -0.009.
STEPS = 400


def test_simulator_serves_the_learned_champion_once_it_beats_unicon(embedded_settings) -> None:
    collection = build_collection(n_images=20_000, seed=0, progress=False)
    index = CandidateIndex.build(collection, seed=0, progress=False)
    simulation = Simulation(
        embedded_settings,
        # one query a message, as the demo: each step's feedback is on the stream at once
        SimulateOptions(
            triplets=10**9, seed=2, images=20_000, calibration_queries=10, queries_per_message=1
        ),
        collection=collection,
        index=index,
    )
    simulation.start()
    worker = OnlineWorker(
        embedded_settings, WorkerOptions(algos=("opar1", "ogdr"), scaler_rows=2000)
    )
    worker.start()
    evaluator = Evaluator(
        embedded_settings,
        # the deployment's test, as it is (`ranking.sequential.PairedTest`)
        EvaluatorOptions(window=20, policy=ChampionPolicy(test=PairedTest())),
    )
    evaluator.start()
    transport = open_transport(embedded_settings)
    triplets, queries = transport.consumer(), transport.consumer()
    triplets.assign([(embedded_settings.triplets_topic, 0)])
    queries.assign([(embedded_settings.queries_topic, 0)])
    switches = sample_value("rankstream_serving_switches_total")
    served = []
    for _ in range(STEPS):  # the demo's interleaving: serve, learn, evaluate, publish
        served.append(simulation.step().served.name)
        worker.process(triplets.poll(timeout_ms=0, max_records=1000))
        worker.checkpoint()
        evaluator.process(queries.poll(timeout_ms=0, max_records=1000))
        evaluator.publish()
    race = evaluator.summary()["race"]
    assert served[0] == UNI_CON and served[-1] in ("opar1", "ogdr")
    assert served[-1] == evaluator.champion == race["incumbent"]
    # on the queries both were scored on since the switch, Uni-Con is worse, on evidence
    assert race["challengers"][UNI_CON]["ci_high"] < 0
    assert sample_value("rankstream_serving_model_info", {"model": served[-1]}) == 1
    assert sample_value("rankstream_serving_model_info", {"model": UNI_CON}) == 0
    assert sample_value("rankstream_serving_switches_total") >= switches + 2
    assert sample_value("rankstream_champion_switches_total") >= 1
    # each judged query names its server, and every model version stamped on it was
    # saved before that model had read the query's own triplet block
    store = simulation.store
    consumer = transport.consumer()
    consumer.assign([(embedded_settings.queries_topic, 0)])
    judged = [decode_query(m.value) for m in consumer.poll(timeout_ms=0, max_records=STEPS)]
    assert [q.served_by for q in judged] == served
    consumer.assign([(embedded_settings.triplets_topic, 0)])
    block_offset = {int(m.key): m.offset for m in consumer.poll(timeout_ms=0, max_records=STEPS)}
    checked = 0
    for q in judged:
        for model, version in q.model_versions.items():
            stored = store.load_version(model, version)
            if stored is None:  # the store keeps a model's last versions only
                continue
            covered = stored.offsets
            if q.query_id in block_offset and model != UNI_CON:
                assert covered[embedded_settings.triplets_topic][0] <= block_offset[q.query_id]
                checked += 1
    assert checked > 20
