"""Every Prometheus metric rankstream exports, defined once.

The names are a contract with the Grafana panels (docs/architecture.md), so all workers import
their metrics from here instead of declaring their own: a rename happens in one place
and two workers in one process never register the same name twice.

Labels only take bounded values: model names (a handful of algorithms), the
evaluator's three skip reasons, dead-letter reasons (mapped onto `DEAD_LETTER_REASONS`
by `bounded_reason`), and topic/partition pairs of the configured topics. Query ids
never become labels.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
    values,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import RestrictedRegistry

from rankstream.stream.settings import Settings

# Dead-letter reasons a label may take (stream.schema.REASONS, checked by a test);
# anything else is reported as "other".
DEAD_LETTER_REASONS: frozenset[str] = frozenset(
    {
        "bad_bytes",
        "bad_schema",
        "unknown_version",
        "wrong_width",
        "non_finite",
        "tied_relevance",
        "oversized",
        "evaluation_failed",
        "unknown_impression",
        "unknown_candidate",
        "late",
        "other",
    }
)

# prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR set before it was imported:
# one of several serving processes, `serve.processes`): every value is written to a file the
# parent's exporter sums, so a value read only when scraped (`Gauge.set_function`) must be
# written instead. A gauge's `multiprocess_mode` says how the processes' values combine.
MULTIPROCESS: bool = values.ValueClass is not values.MutexValue

_CHECKPOINT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_REFIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)

# --- producer (simulator, replay) -------------------------------------------------------
TRIPLETS_PRODUCED = Counter(
    "rankstream_triplets_produced_total", "Triplet records sent to the triplets topic."
)
JUDGED_QUERIES_PRODUCED = Counter(
    "rankstream_judged_queries_produced_total",
    "Judged queries sent to the queries topic (simulator and ingestion API).",
)
QUERIES_WITHOUT_TRIPLETS = Counter(
    "rankstream_queries_without_triplets_total",
    "Judged queries whose judged candidates hold fewer than two distinct grades, so they "
    "yield no triplets (their judged query is still sent, for the evaluator).",
)

# --- online worker ------------------------------------------------------------------------
TRIPLETS_CONSUMED = Counter(
    "rankstream_triplets_consumed_total",
    "Triplet records read from the triplets topic and decoded (each counted once per worker).",
)
MODEL_UPDATES = Counter(
    "rankstream_model_updates_total",
    "Weight updates applied to a model (rows whose update rule changed the weights).",
    ["model"],
)
MODEL_VERSION = Gauge(
    "rankstream_model_version", "Version of a model last loaded or saved by this worker.", ["model"]
)
CONSUMER_LAG_RECORDS = Gauge(
    "rankstream_consumer_lag_records",
    "Triplet records between the worker's position and the end of a partition (estimated "
    "from message lag x mean records per message).",
    ["topic", "partition"],
)
LEARN_SECONDS = Counter(
    "rankstream_learn_seconds_total",
    "CPU seconds a model spent learning triplets (a fused pass shared by several linear "
    "models is split equally among them).",
    ["model"],
)
CHECKPOINT_SECONDS = Histogram(
    "rankstream_checkpoint_seconds",
    "Time to save one checkpoint of every dirty model to the store.",
    buckets=_CHECKPOINT_BUCKETS,
)
CHECKPOINT_FAILURES = Counter(
    "rankstream_checkpoint_failures_total",
    "Checkpoints that failed on a transient store error and will be retried.",
)
FENCING_ERRORS = Counter(
    "rankstream_fencing_errors_total",
    "Saves refused because a newer writer owns the model (this worker is stale).",
    ["model"],
)
DEAD_LETTERS = Counter(
    "rankstream_dead_letters_total",
    "Messages sent to the dead-letter topic, by reason.",
    ["reason"],
)
LAST_CHECKPOINT_TIMESTAMP = Gauge(
    "rankstream_last_checkpoint_timestamp_seconds",
    "Unix time of a model's last successful save (online checkpoints, batch refits and "
    "the reservoir); Grafana shows time() minus this as the checkpoint age.",
    ["model"],
)

# --- evaluator ----------------------------------------------------------------------------
NDCG_AT_50 = Gauge(
    "rankstream_ndcg_at_50",
    "Rolling mean NDCG@50 over recent judged queries, scored before the update they cause.",
    ["model"],
)
LAST_POLL_TIMESTAMP = Gauge(
    "rankstream_worker_last_poll_timestamp_seconds",
    "Unix time of a worker's last successful poll of its topics (health: connected and "
    "consuming, or idle with nothing to read).",
    ["worker"],
)
MEAN_AVERAGE_PRECISION = Gauge(
    "rankstream_map", "Rolling mean average precision over recent judged queries.", ["model"]
)
QUERIES_EVALUATED = Counter(
    "rankstream_queries_evaluated_total", "Judged queries scored by the evaluator."
)
EVALUATOR_SKIPPED = Counter(
    "rankstream_evaluator_skipped_total",
    "Models not scored on a judged query: stamped version trimmed from the store, kind "
    "without a scorer, or a scoring error.",
    ["reason"],
)
JUDGED_QUERIES = Counter(
    "rankstream_judged_queries_total",
    "Judged queries the evaluator read, by how many candidates carry a grade: all, partial "
    "(NDCG@50 over the graded ones) or none (not scored).",
    ["judgments"],
)
CHAMPION_SWITCHES = Counter(
    "rankstream_champion_switches_total",
    "Times the evaluator's champion changed (a challenger's paired test said switch).",
)
# the champion race (`selection.judged_race`): one paired sequential test per challenger
CHAMPION_RACE_PAIRS = Gauge(
    "rankstream_champion_race_paired_queries",
    "Judged queries both the challenger and the champion were scored on, this race.",
    ["model"],
)
CHAMPION_RACE_MEAN = Gauge(
    "rankstream_champion_race_mean_difference",
    "Mean per-query NDCG@50 difference, challenger minus champion, on the paired queries.",
    ["model"],
)
CHAMPION_RACE_CI = Gauge(
    "rankstream_champion_race_ci",
    "Always-valid one-sided (1 - alpha) bounds of the mean difference (bound: low, high).",
    ["model", "bound"],
)
CHAMPION_RACE_STATISTIC = Gauge(
    "rankstream_champion_race_log_statistic",
    "log of the betting test's wealth against 'no better'; a switch once it reaches "
    "rankstream_champion_race_threshold.",
    ["model"],
)
CHAMPION_RACE_DECISION = Gauge(
    "rankstream_champion_race_decision",
    "The race's verdict: 1 switch, 0 undecided, -1 refused (not delta better).",
    ["model"],
)
CHAMPION_RACE_THRESHOLD = Gauge(
    "rankstream_champion_race_threshold",
    "log(k/alpha), k the challengers raced: the statistic a switch needs in the judged race "
    "(the evaluator); the interleaving race's challengers need "
    "rankstream_interleaving_threshold.",
)
CHAMPION_RACE_GAUGES = (
    CHAMPION_RACE_PAIRS,
    CHAMPION_RACE_MEAN,
    CHAMPION_RACE_CI,
    CHAMPION_RACE_STATISTIC,
    CHAMPION_RACE_DECISION,
)
# --- the interleaving race (`selection.click_race`, in the click join) --------------------
INTERLEAVING_IMPRESSIONS = Counter(
    "rankstream_interleaving_impressions_interleaved_total",
    "Interleaved impressions of the champion with this challenger the click join credited.",
    ["challenger"],
)
INTERLEAVING_OUTCOMES = Counter(
    "rankstream_interleaving_outcomes_total",
    "Interleaved impressions by the challenger's outcome (win, loss, tie; no click is a tie).",
    ["challenger", "outcome"],
)
INTERLEAVING_STATISTIC = Gauge(
    "rankstream_interleaving_log_statistic",
    "log of the interleaving race's wealth against 'no better'; a switch once it reaches "
    "rankstream_interleaving_threshold.",
    ["challenger"],
)
INTERLEAVING_DECISION = Gauge(
    "rankstream_interleaving_decision",
    "The interleaving race's verdict: 1 switch, 0 undecided, -1 refused.",
    ["challenger"],
)
INTERLEAVING_THRESHOLD = Gauge(
    "rankstream_interleaving_threshold",
    "log(k/alpha): the statistic an interleaving challenger's switch needs, k the "
    "challengers raced against the champion (alpha holds for the whole family).",
)

# --- serving (the simulated search engine) ------------------------------------------------
SERVING_MODEL_INFO = Gauge(
    "rankstream_serving_model_info",
    "1 for the model the simulated search engine currently ranks with, 0 for the others.",
    ["model"],
    multiprocess_mode="livemostrecent",
)
SERVING_SWITCHES = Counter(
    "rankstream_serving_switches_total",
    "Times the serving model changed (a new champion or a fixed model first loaded).",
)

# --- the HTTP API (`rankstream serve`) ---------------------------------------------------
# route: the route template (a fixed set, "other" for anything else); model: the served
# model's name ("-" where no model is involved); status: the HTTP status code.
HTTP_REQUEST_SECONDS = Histogram(
    "rankstream_http_request_seconds",
    "Time to answer an HTTP API request, by route and served model.",
    ["route", "model"],
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
HTTP_REQUESTS = Counter(
    "rankstream_http_requests_total",
    "HTTP API requests answered, by route and status (errors: status >= 400).",
    ["route", "status"],
)
RANKINGS_INTERLEAVED = Counter(
    "rankstream_rankings_interleaved_total",
    "/v1/rank answers that were an interleaved list (RANKSTREAM_INTERLEAVING_SHARE).",
)
CHALLENGER_IMPRESSIONS = Counter(
    "rankstream_challenger_impressions_total",
    "Rankings served for the champion that were drafted with this challenger (interleaved).",
    ["challenger"],
)
CHALLENGER_SHARE = Gauge(
    "rankstream_challenger_impression_share",
    "Share of the last 1,000 rankings served for the champion drafted with this challenger: "
    "what the challenger costs the users (0 once its click race refused it).",
    ["challenger"],
    multiprocess_mode="livemostrecent",
)
SERVING_MODEL_VERSION = Gauge(
    "rankstream_serving_model_version",
    "The version the HTTP API serves for a model by default (its newest, or its pin).",
    ["model"],
    multiprocess_mode="livemostrecent",
)
MODEL_PINNED = Gauge(
    "rankstream_model_pinned",
    "1 while a model is pinned (`rankstream model pin`: served at its pinned version), else "
    "0; for `engine` the kill switch: champion requests get the engine's own order.",
    ["model"],
    multiprocess_mode="livemostrecent",
)
SERVING_RELOAD_LAG = Histogram(
    "rankstream_serving_reload_lag_seconds",
    "From a model version's save to the HTTP API serving it (hot reload).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0),
)

# --- click join ---------------------------------------------------------------------------
CTR_CUTOFFS = (1, 3, 5, 10)  # the k of click-through rate at k (bounded label values)
PROPENSITY_RANKS = 10  # ranks whose estimated propensity is exported
JOIN_IMPRESSIONS = Counter(
    "rankstream_join_impressions_total",
    "Impressions whose session the click join closed (clicked or not).",
)
JOIN_CLICKS = Counter(
    "rankstream_join_clicks_total", "Clicks the click join joined to their impression."
)
JOIN_CLICKED_AT = Counter(
    "rankstream_join_impressions_clicked_at_total",
    "Closed impressions with a click within the top k (CTR@k = this / impressions).",
    ["k"],
)
JOIN_RECIPROCAL_RANK = Counter(
    "rankstream_join_reciprocal_rank_total",
    "Sum over closed impressions of 1 / rank of the first click, 0 without one (MRR = "
    "this / impressions).",
)
JOIN_LAG_SECONDS = Gauge(
    "rankstream_join_lag_seconds",
    "Wall-clock seconds from the last closed session's impression to its pairs' emission.",
)
JOIN_WAITING = Gauge(
    "rankstream_join_window_sessions", "Impressions open in the click join's window."
)
CLICK_PROPENSITY = Gauge(
    "rankstream_click_propensity",
    "Estimated P(examined at rank) / P(examined at rank 1), the click join's IPS weights.",
    ["rank"],
)
# counterfactual click-DCG@k of every policy, live (`selection.live_estimates`, in the join)
COUNTERFACTUAL_CLICK_DCG = Gauge(
    "rankstream_counterfactual_click_dcg",
    "Counterfactual click-DCG@10 of a policy (a stored model, logged, engine) from the "
    "closed sessions, by estimator (ips, snips).",
    ["model", "estimator"],
)
COUNTERFACTUAL_CLICK_DCG_CI = Gauge(
    "rankstream_counterfactual_click_dcg_ci",
    "95% interval bounds of rankstream_counterfactual_click_dcg (bound: low, high).",
    ["model", "estimator", "bound"],
)
COUNTERFACTUAL_IMPRESSIONS = Gauge(
    "rankstream_counterfactual_impressions",
    "Closed sessions a policy's counterfactual estimate covers.",
    ["model"],
)
COUNTERFACTUAL_DIFFERENCE = Gauge(
    "rankstream_counterfactual_difference",
    "A policy's counterfactual click-DCG@10 minus a baseline's (logged, engine), paired per "
    "impression, by estimator.",
    ["model", "baseline", "estimator"],
)
COUNTERFACTUAL_DIFFERENCE_CI = Gauge(
    "rankstream_counterfactual_difference_ci",
    "95% interval bounds of rankstream_counterfactual_difference (bound: low, high).",
    ["model", "baseline", "estimator", "bound"],
)

# --- impressions and clicks (`producers.impression_producer`, `producers.click_producer`) ---
IMPRESSIONS_LOGGED = Counter(
    "rankstream_impressions_logged_total",
    "Served rankings handed to the impressions topic (impression logging, `rankstream serve`).",
)
IMPRESSIONS_DROPPED = Counter(
    "rankstream_impressions_dropped_total",
    "Impressions not written, by reason: queue_full (the writer fell behind; the ranking was "
    "answered anyway), send_failed, delivery_failed, invalid, shutdown.",
    ["reason"],
)
IMPRESSIONS_WAITING = Gauge(
    "rankstream_impressions_waiting",
    "Impressions queued for the writer thread (at most RANKSTREAM_IMPRESSION_QUEUE).",
    multiprocess_mode="livesum",
)
CLICKS_PRODUCED = Counter(
    "rankstream_clicks_produced_total",
    "Click rows sent to the clicks topic (a no-click row counts too), by the API, a "
    "ClickProducer or the simulator's clicking users.",
)

# --- batch worker -------------------------------------------------------------------------
REFIT_SECONDS = Histogram(
    "rankstream_refit_seconds",
    "Time to refit a batch model on the reservoir sample.",
    ["model"],
    buckets=_REFIT_BUCKETS,
)


def mark_checkpoint(model: str) -> None:
    """Record that `model` was just saved (feeds the Grafana "checkpoint age" panel)."""
    LAST_CHECKPOINT_TIMESTAMP.labels(model=model).set_to_current_time()


def bounded_reason(reason: str) -> str:
    """Map a dead-letter reason onto the fixed label set, so labels stay bounded."""
    return reason if reason in DEAD_LETTER_REASONS else "other"


class _Exported(CollectorRegistry):
    """What the /metrics server shows: this process's metrics, or, in the parent of serving
    processes (`export_processes`), the sum over the files of its processes, the dead ones'
    counters included (a total never goes back when a process is replaced)."""

    def __init__(self) -> None:
        super().__init__(auto_describe=False)
        self.processes: CollectorRegistry | None = None

    def _source(self) -> CollectorRegistry:
        return REGISTRY if self.processes is None else self.processes

    def collect(self) -> Iterable[Metric]:
        return self._source().collect()

    def restricted_registry(self, names: Iterable[str]) -> RestrictedRegistry:
        return self._source().restricted_registry(names)


EXPORTED = _Exported()


def export_processes(directory: str | None) -> None:
    """From now on /metrics shows the sum over the processes writing to `directory`
    (prometheus_client's multiprocess mode); None: this process's own again."""
    if directory is None:
        EXPORTED.processes = None
        return
    processes = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(processes, path=directory)
    EXPORTED.processes = processes


def start_metrics_server(settings: Settings) -> int | None:
    """Serve /metrics on settings.metrics_host:metrics_port; return the bound port.

    Returns None (and serves nothing) when no port is configured. Port 0 binds an
    ephemeral port, which tests use to avoid collisions.
    """
    if settings.metrics_port is None:
        return None
    server, _thread = start_http_server(
        settings.metrics_port, addr=settings.metrics_host, registry=EXPORTED
    )
    return int(server.server_address[1])


def sample_value(name: str, labels: dict[str, str] | None = None) -> float:
    """Current value of one exported sample (0.0 when never set); for tests and reports."""
    value = REGISTRY.get_sample_value(name, labels or {})
    return 0.0 if value is None else float(value)
