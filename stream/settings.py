"""Where a process finds its transport, store and metrics endpoint: the deployment settings.

Configuration comes from the environment (`RANKSTREAM_*`), read here by `Settings.from_env`
and nowhere else, so `VARIABLES` is the one list of what the system can be told, each
variable with its check (a bad value is a `SettingsError` naming it). Unset
Kafka/Redis settings mean the embedded default (no services). It lives in `stream/`, the
lowest layer that needs it; the layers above receive a `Settings`, never the environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from rankstream.ranking import DEFAULT_PHI_DIM, INTERVENTIONS, SHUFFLE

ENV_PREFIX = "RANKSTREAM_"
# The values kafka-python takes (its consumer's docs; `kafka.net.sasl.SASL_MECHANISMS`).
KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KAFKA_SASL_MECHANISMS = (
    "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER", "AWS_MSK_IAM",
)  # fmt: skip
REDIS_URL_SCHEMES = ("redis", "rediss", "unix")  # what redis-py's from_url understands
SENTINEL_SCHEME = "redis+sentinel"  # the primary of a Sentinel-watched set (below)
# Kafka's topic characters, and room for the longest suffix (".dead-letter") within 249
_TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,200}")
T = TypeVar("T", int, float)  # what a ranged setting parses to


class SettingsError(ValueError):
    """A RANKSTREAM_* variable the system cannot use: names it, its value and what it wants.

    A ValueError, so code that already refuses bad values keeps doing so; the CLI prints
    it as one line and exits 2 before any work starts.
    """

    def __init__(self, variable: str, value: str, expected: str) -> None:
        self.variable, self.value, self.expected = variable, value, expected
        super().__init__(f"{variable} must be {expected}, got {value!r}")


def _env(name: str) -> str | None:
    value = os.environ.get(ENV_PREFIX + name)
    return value if value not in (None, "") else None


def _text(name: str, value: str) -> str:
    """Free text (names, passwords, paths): anything but blank."""
    if not value.strip():
        raise SettingsError(ENV_PREFIX + name, value, "non-blank text")
    return value


def _host(name: str, value: str) -> str:
    if not value.strip() or any(c.isspace() for c in value):
        raise SettingsError(ENV_PREFIX + name, value, "a host name or address (no spaces)")
    return value


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _integer(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _ranged(
    convert: Callable[[str], T | None], accepts: Callable[[T], bool], expected: str
) -> Callable[[str, str], T]:
    """A parser of one number: `convert` (`_integer`, `_number`: None when the text is not
    one), kept when `accepts` it, else a SettingsError saying it must be `expected`."""

    def parse(name: str, value: str) -> T:
        number = convert(value)
        if number is None or not accepts(number):
            raise SettingsError(ENV_PREFIX + name, value, expected)
        return number

    return parse


_port = _ranged(_integer, lambda n: 0 <= n <= 65535, "an integer port 0-65535 (0: any free port)")
_positive_int = _ranged(_integer, lambda n: n >= 1, "an integer >= 1")
_processes = _ranged(_integer, lambda n: 0 <= n <= 1024, "an integer 0-1024 (0: one per core)")
# an error rate: strictly between 0 and 1
_fraction = _ranged(_number, lambda n: 0.0 < n < 1.0, "a number between 0 and 1 (exclusive)")
# a share of traffic: 0 (none) up to, not including, 1
_share = _ranged(_number, lambda n: 0.0 <= n < 1.0, "a number >= 0 and < 1")
# a share of traffic that may be all of it: 0 up to 1, both included
_portion = _ranged(_number, lambda n: 0.0 <= n <= 1.0, "a number >= 0 and <= 1")
# a positive NDCG difference, at most 1
_ndcg_difference = _ranged(_number, lambda n: 0.0 < n <= 1.0, "a number > 0 and <= 1")
# NaN, inf and negatives fail too
_positive_seconds = _ranged(_number, lambda n: 0 < n < 10**7, "a number of seconds > 0")


def _bootstrap(name: str, value: str) -> str:
    """host:port[,host:port...] ([v6::addr]:port too), each port 1-65535."""
    for server in value.split(","):
        host, colon, port = server.strip().rpartition(":")
        number = _integer(port) if colon and host else None
        if number is None or not 1 <= number <= 65535:
            raise SettingsError(
                ENV_PREFIX + name, value, "comma-separated host:port pairs (ports 1-65535)"
            )
    return value


def _url(schemes: tuple[str, ...], needs_host: bool = True):  # type: ignore[no-untyped-def]
    def parse(name: str, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in schemes or (
            needs_host and parts.scheme != "unix" and not parts.hostname
        ):
            wanted = " or ".join(f"{s}://" for s in schemes)
            raise SettingsError(ENV_PREFIX + name, value, f"a {wanted} URL")
        try:
            parts.port  # noqa: B018 (raises ValueError for a port out of range)
        except ValueError:
            raise SettingsError(ENV_PREFIX + name, value, "a URL with a port 1-65535") from None
        return value

    return parse


@dataclass(frozen=True)
class SentinelTarget:
    """`redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db]`.

    The Sentinels to ask and the master name they watch; the password is the data
    nodes' (primary and replicas), the Sentinels themselves are reached without one.
    Redis has no URL form for this; it follows the one Celery and Sidekiq use.
    """

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None


def parse_sentinel_url(value: str) -> SentinelTarget:
    """The parts of a redis+sentinel:// URL; ValueError saying what is wrong."""
    scheme, sep, rest = value.partition("://")
    if scheme != SENTINEL_SCHEME or not sep:
        raise ValueError(f"not a {SENTINEL_SCHEME}:// URL")
    credentials, at, rest = rest.rpartition("@")
    hosts, _, path = rest.partition("/")
    sentinels = []
    for server in hosts.split(","):
        host, colon, port = server.strip().rpartition(":")
        number = _integer(port) if colon and host else None
        if number is None or not 1 <= number <= 65535:
            raise ValueError("sentinels must be comma-separated host:port pairs (ports 1-65535)")
        sentinels.append((host.strip("[]"), number))
    master, _, db = path.partition("/")
    if not master or (db and _integer(db) is None) or "/" in db:
        raise ValueError("the path must be /<master name>[/<db number>]")
    username, _, password = credentials.partition(":") if at else ("", "", "")
    return SentinelTarget(
        tuple(sentinels), master, int(db or 0), username or None, password or None
    )


def _redis_url(name: str, value: str) -> str:
    """A redis://, rediss:// or unix:// URL, or a redis+sentinel:// one."""
    if not value.startswith(f"{SENTINEL_SCHEME}:"):
        return _url(REDIS_URL_SCHEMES)(name, value)
    try:
        parse_sentinel_url(value)
    except ValueError as exc:
        raise SettingsError(
            ENV_PREFIX + name,
            value,
            f"{SENTINEL_SCHEME}://host:port[,host:port...]/master[/db] ({exc})",
        ) from None
    return value


def _one_of(choices: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def parse(name: str, value: str) -> str:
        if value not in choices:
            raise SettingsError(ENV_PREFIX + name, value, f"one of {', '.join(choices)}")
        return value

    return parse


def _topic_prefix(name: str, value: str) -> str:
    if not _TOPIC_PREFIX.fullmatch(value):
        raise SettingsError(
            ENV_PREFIX + name, value, "1-200 of Kafka's topic characters: letters, digits, . _ -"
        )
    return value


# How `rankstream serve` and the simulated engine interleave (`selection.click_race`): the
# champion with one challenger per impression (team draft, round-robin), or with every
# challenger at once (team-draft multileave).
TEAM_DRAFT, MULTILEAVE = "team-draft", "multileave"
INTERLEAVING_METHODS = (TEAM_DRAFT, MULTILEAVE)


def _interleaving_method(name: str, value: str) -> str:
    if value not in INTERLEAVING_METHODS:
        raise SettingsError(ENV_PREFIX + name, value, " or ".join(INTERLEAVING_METHODS))
    return value


def _on_off(name: str, value: str) -> bool:
    """A switch: on or off."""
    if value not in ("on", "off"):
        raise SettingsError(ENV_PREFIX + name, value, "on or off")
    return value == "on"


# What flows, one topic each, named `<topic_prefix>.<kind>`: the one list of topic names.
TOPIC_KINDS = ("triplets", "queries", "dead-letter", "impressions", "clicks")


def default_data_dir() -> str:
    """~/.cache/rankstream: the caches (collections, face features, Kafka jars, services)."""
    return os.path.expanduser("~/.cache/rankstream")


def _topic_of(kind: str) -> property:
    """A read-only `Settings` attribute naming the topic of `kind` (`Settings.topic`)."""

    def topic(settings: Settings) -> str:
        return settings.topic(kind)

    return property(topic, doc=f"The {kind} topic: `{{topic_prefix}}.{kind}`.")


@dataclass(frozen=True)
class Settings:
    """What a process needs to find its transport, store and metrics endpoint."""

    kafka_bootstrap: str | None = None  # host:port[,host:port]; None = embedded transport
    # redis://[user:pass@]host:port/db, or redis+sentinel://h:p,h:p,h:p/master/db (the
    # primary the Sentinels name, followed through failovers); None = embedded store
    redis_url: str | None = None
    redis_password: str | None = None  # overrides the URL's password (secrets from env files)
    prometheus_url: str | None = None  # http://host:port of the Prometheus that scrapes workers
    metrics_port: int | None = None  # Prometheus /metrics port; None = no HTTP exporter
    metrics_host: str = "127.0.0.1"  # bind address of /metrics; 0.0.0.0 only when asked
    topic_prefix: str = "rankstream"
    # Kafka security pass-through (kafka-python names)
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = None
    kafka_ssl_cafile: str | None = None
    kafka_ssl_certfile: str | None = None  # client certificate (PEM) for mutual TLS
    kafka_ssl_keyfile: str | None = None  # its private key (PEM)
    data_dir: str = field(default_factory=default_data_dir)
    # the HTTP API (`rankstream serve`): bind address, port, bearer token, body limit
    api_host: str = "127.0.0.1"  # 0.0.0.0 only when asked (compose)
    api_port: int = 8000
    api_token: str | None = None  # set: every route but /healthz and /readyz requires it
    api_max_body_bytes: int = 8 * 1024 * 1024
    # The longest a request waits on Kafka or the store before answering 503 (Retry-After),
    # and the longest the API waits for a request body before answering 408.
    api_deadline_s: float = 5.0
    api_body_deadline_s: float = 10.0
    # SIGTERM: the longest `rankstream serve` takes to stop, however stalled its services.
    api_grace_s: float = 10.0
    # Serving processes sharing the API's port (`serve.processes`); 0: one per usable core.
    # One only where state lives in one process (the embedded transport, store or workers).
    api_processes: int = 0
    # How long a POST /v1/feedback Idempotency-Key is remembered (its first answer replayed).
    idempotency_retention_s: float = 24 * 3600.0
    # The width d of phi(query, image) this deployment learns from: every message,
    # recording and stored model must have it (others are refused, never misread).
    phi_dim: int = DEFAULT_PHI_DIM
    # The champion race (`selection.judged_race`): its error rate, and the smallest NDCG@50
    # difference worth a switch (`ranking.sequential.PairedTest`).
    champion_alpha: float = 0.01
    champion_delta: float = 0.005
    # Candidates' phi the empty store's Uni-Con is scaled on before its scaling is final
    # (`selection.unicon_baseline`): every ranking request adds its candidates until then.
    unicon_calibration: int = 1000
    # `rankstream serve` writes every ranking it answers to the impressions topic (what a
    # click names), from a queue of at most `impression_queue` impressions drained by a
    # thread: ranking never waits on it; what a full queue drops is counted and logged.
    # 1,000 impressions of 300 x 36 phi hold ~43 MB (a second of a busy server: Kafka's
    # producer buffers 32 MB more behind it).
    impression_logging: bool = True
    impression_queue: int = 1000
    # The click join (`workers.click_join`): an impression's clicks join it for this long
    # (event time), and a click that overtook its impression waits this long for it.
    click_window_s: float = 1800.0
    click_grace_s: float = 60.0
    # The share of logged rankings `rankstream serve` answers randomized
    # (`ranking.propensity.randomize`), from which the click join estimates propensities:
    # `intervention` shuffle (the top 10 in a random order, RandTop-n: the default, 5% of
    # the traffic reaches 10% at ranks 1-10 for 1/rank^2 users within 10^6 impressions)
    # or swap (ranks 1 and k traded). Off by default (the answer's scores then always
    # descend): a deployment that learns from clicks sets a small share, e.g. 0.05;
    # without it the join's weights use the 1/rank prior.
    intervention_share: float = 0.0
    intervention: str = SHUFFLE
    # The share of /v1/rank requests for the champion (no model or version named) that
    # `rankstream serve` (and the simulated engine of `simulate --feedback clicks:MODEL` and
    # the click demo, for the rankings it serves with the champion) answers with an
    # interleaved list of the champion and challengers (`selection.click_race`), whose
    # clicks the click join credits to decide the champion on click traffic
    # (`selection.click_race`). Default 0.1 (issue 38): an engine that posts only clicks
    # gets a learned champion when the click race finds one better (at 0 it was served
    # Uni-Con forever); the users' cost is about the share x half the mean NDCG@50 gap of
    # the challengers the race cannot refuse (users whose clicks say little), so 0.1, not
    # more; a refused challenger is not drafted until it learned twice as much. `serve`
    # interleaves only once it has accepted clicks (judged-only engines see none). 0: off.
    interleaving_share: float = 0.1
    interleaving_method: str = TEAM_DRAFT
    # Shadow mode (`serve.app`, `selection.engine_ranking`): `rankstream serve` answers every
    # champion request with the engine's own order unchanged (the request must carry
    # engine_scores: without them a 422), logs it as an impression of the model `engine`,
    # and interleaves nothing; the click join learns from the clicks on it as on any
    # impression. `intervention_share` of those rankings still gets the randomized
    # intervention (0, the default: pure shadow). Off: the engine races as the incumbent.
    shadow: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.phi_dim, bool) or not isinstance(self.phi_dim, int) or self.phi_dim < 1:
            raise ValueError(f"phi_dim must be an integer >= 1, got {self.phi_dim!r}")
        if self.intervention not in INTERVENTIONS:
            raise ValueError(f"intervention must be one of {INTERVENTIONS}: {self.intervention!r}")

    def topic(self, kind: str) -> str:
        """The topic of one of `TOPIC_KINDS`."""
        if kind not in TOPIC_KINDS:
            raise ValueError(f"unknown topic kind {kind!r}; kinds: {', '.join(TOPIC_KINDS)}")
        return f"{self.topic_prefix}.{kind}"

    @property
    def topics(self) -> list[str]:
        """Every topic of this deployment."""
        return [self.topic(kind) for kind in TOPIC_KINDS]

    triplets_topic = _topic_of("triplets")
    queries_topic = _topic_of("queries")
    dead_letter_topic = _topic_of("dead-letter")
    impressions_topic = _topic_of("impressions")
    clicks_topic = _topic_of("clicks")

    @classmethod
    def from_env(cls) -> Settings:
        """The Settings the environment describes (unset or empty = the defaults).

        Every variable is checked here: a SettingsError names the first bad one.
        """
        values = {
            field_name: parse(name, text)
            for field_name, (name, parse) in VARIABLES.items()
            if (text := _env(name)) is not None
        }
        return cls(**values)


# Settings field -> (variable after RANKSTREAM_, its check): the one list of what the
# environment can set. Free text (passwords, file names, a token) is only refused blank.
VARIABLES: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "kafka_bootstrap": ("KAFKA_BOOTSTRAP", _bootstrap),
    "redis_url": ("REDIS_URL", _redis_url),
    "redis_password": ("REDIS_PASSWORD", _text),
    "prometheus_url": ("PROMETHEUS_URL", _url(("http", "https"))),
    "metrics_port": ("METRICS_PORT", _port),
    "metrics_host": ("METRICS_HOST", _host),
    "topic_prefix": ("TOPIC_PREFIX", _topic_prefix),
    "kafka_security_protocol": ("KAFKA_SECURITY_PROTOCOL", _one_of(KAFKA_SECURITY_PROTOCOLS)),
    "kafka_sasl_mechanism": ("KAFKA_SASL_MECHANISM", _one_of(KAFKA_SASL_MECHANISMS)),
    "kafka_sasl_username": ("KAFKA_SASL_USERNAME", _text),
    "kafka_sasl_password": ("KAFKA_SASL_PASSWORD", _text),
    "kafka_ssl_cafile": ("KAFKA_SSL_CAFILE", _text),
    "kafka_ssl_certfile": ("KAFKA_SSL_CERTFILE", _text),
    "kafka_ssl_keyfile": ("KAFKA_SSL_KEYFILE", _text),
    "data_dir": ("DATA_DIR", _text),
    "api_host": ("API_HOST", _host),
    "api_port": ("API_PORT", _port),
    "api_token": ("API_TOKEN", _text),
    "api_max_body_bytes": ("API_MAX_BODY_BYTES", _positive_int),
    "api_deadline_s": ("API_DEADLINE_SECONDS", _positive_seconds),
    "api_body_deadline_s": ("API_BODY_DEADLINE_SECONDS", _positive_seconds),
    "api_grace_s": ("API_GRACE_SECONDS", _positive_seconds),
    "api_processes": ("API_PROCESSES", _processes),
    "idempotency_retention_s": ("IDEMPOTENCY_RETENTION_SECONDS", _positive_seconds),
    "phi_dim": ("PHI_DIM", _positive_int),
    "champion_alpha": ("CHAMPION_ALPHA", _fraction),
    "champion_delta": ("CHAMPION_DELTA", _ndcg_difference),
    "unicon_calibration": ("UNICON_CALIBRATION", _positive_int),
    "impression_logging": ("IMPRESSION_LOGGING", _on_off),
    "impression_queue": ("IMPRESSION_QUEUE", _positive_int),
    "click_window_s": ("CLICK_WINDOW_SECONDS", _positive_seconds),
    "click_grace_s": ("CLICK_GRACE_SECONDS", _positive_seconds),
    "intervention_share": ("INTERVENTION_SHARE", _share),
    "intervention": ("INTERVENTION", _one_of(INTERVENTIONS)),
    "interleaving_share": ("INTERLEAVING_SHARE", _portion),
    "interleaving_method": ("INTERLEAVING_METHOD", _interleaving_method),
    "shadow": ("SHADOW", _on_off),
}
