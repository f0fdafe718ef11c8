"""Deployment settings: the feature width (RANKSTREAM_PHI_DIM) and its checks."""

from __future__ import annotations

import pytest

from rankstream.stream.settings import DEFAULT_PHI_DIM, Settings


def test_the_width_defaults_to_the_papers_36_and_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("RANKSTREAM_PHI_DIM", raising=False)
    assert Settings.from_env().phi_dim == DEFAULT_PHI_DIM == 36
    monkeypatch.setenv("RANKSTREAM_PHI_DIM", "128")
    assert Settings.from_env().phi_dim == 128


@pytest.mark.parametrize("value", ["0", "-3", "wide", "8.5"])
def test_a_bad_width_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("RANKSTREAM_PHI_DIM", value)
    with pytest.raises(ValueError, match="RANKSTREAM_PHI_DIM must be an integer >= 1"):
        Settings.from_env()


def test_settings_refuse_a_width_below_one():
    with pytest.raises(ValueError, match="phi_dim"):
        Settings(phi_dim=0)


def test_settings_refuse_an_intervention_serve_cannot_make():
    assert Settings().intervention == "shuffle"  # RandTop-n: what meets the target at 5%
    with pytest.raises(ValueError, match="intervention"):
        Settings(intervention="randtop")


def test_every_settings_field_is_read_from_one_variable():
    """`VARIABLES` is the one list of what the environment sets: every field, once."""
    from dataclasses import fields

    from rankstream.stream.settings import VARIABLES

    assert set(VARIABLES) == {f.name for f in fields(Settings)}
    names = [name for name, _check in VARIABLES.values()]
    assert len(names) == len(set(names))


def test_every_variable_is_documented_in_the_settings_reference():
    from pathlib import Path

    from rankstream.stream.settings import ENV_PREFIX, VARIABLES

    contracts = (Path(__file__).parents[1] / "docs" / "reference" / "settings.md").read_text()
    missing = [ENV_PREFIX + n for n, _ in VARIABLES.values() if ENV_PREFIX + n not in contracts]
    assert not missing


GOOD = {
    "RANKSTREAM_KAFKA_BOOTSTRAP": ("kafka-a:9093,[::1]:9092", "kafka_bootstrap", None),
    "RANKSTREAM_REDIS_URL": ("unix:///run/redis.sock", "redis_url", None),
    "RANKSTREAM_PROMETHEUS_URL": ("https://prom.example:9090", "prometheus_url", None),
    "RANKSTREAM_METRICS_PORT": ("9100", "metrics_port", 9100),
    "RANKSTREAM_API_PORT": ("0", "api_port", 0),
    "RANKSTREAM_TOPIC_PREFIX": ("team-a.rank_v2", "topic_prefix", None),
    "RANKSTREAM_KAFKA_SECURITY_PROTOCOL": ("SSL", "kafka_security_protocol", None),
    "RANKSTREAM_API_MAX_BODY_BYTES": ("1024", "api_max_body_bytes", 1024),
    "RANKSTREAM_API_DEADLINE_SECONDS": ("2.5", "api_deadline_s", 2.5),
    "RANKSTREAM_IMPRESSION_LOGGING": ("off", "impression_logging", False),
    "RANKSTREAM_IMPRESSION_QUEUE": ("50", "impression_queue", 50),
    "RANKSTREAM_IDEMPOTENCY_RETENTION_SECONDS": ("3600", "idempotency_retention_s", 3600.0),
    "RANKSTREAM_INTERVENTION": ("swap", "intervention", None),
}


@pytest.mark.parametrize("variable", sorted(GOOD))
def test_good_values_are_read(monkeypatch, variable):
    text, field_name, parsed = GOOD[variable]
    monkeypatch.setenv(variable, text)
    assert getattr(Settings.from_env(), field_name) == (text if parsed is None else parsed)


BAD = {
    "RANKSTREAM_METRICS_PORT": ("abc", "an integer port 0-65535"),
    "RANKSTREAM_API_PORT": ("70000", "an integer port 0-65535"),
    "RANKSTREAM_API_MAX_BODY_BYTES": ("0", "an integer >= 1"),
    "RANKSTREAM_KAFKA_BOOTSTRAP": ("kafka-a", "comma-separated host:port pairs"),
    "RANKSTREAM_REDIS_URL": ("localhost:6379", "a redis:// or rediss:// or unix:// URL"),
    "RANKSTREAM_PROMETHEUS_URL": ("http://prom:99999", "a URL with a port 1-65535"),
    "RANKSTREAM_METRICS_HOST": ("local host", "a host name or address"),
    "RANKSTREAM_TOPIC_PREFIX": ("rank stream", "Kafka's topic characters"),
    "RANKSTREAM_KAFKA_SECURITY_PROTOCOL": ("TLS", "one of PLAINTEXT, SSL"),
    "RANKSTREAM_KAFKA_SASL_MECHANISM": ("scram", "one of PLAIN, SCRAM-SHA-256"),
    "RANKSTREAM_API_TOKEN": ("   ", "non-blank text"),
    "RANKSTREAM_API_DEADLINE_SECONDS": ("nan", "a number of seconds > 0"),
    "RANKSTREAM_API_GRACE_SECONDS": ("-1", "a number of seconds > 0"),
    "RANKSTREAM_API_PROCESSES": ("-1", "an integer 0-1024 (0: one per core)"),
    "RANKSTREAM_IMPRESSION_LOGGING": ("yes", "on or off"),
    "RANKSTREAM_IMPRESSION_QUEUE": ("0", "an integer >= 1"),
    "RANKSTREAM_INTERVENTION": ("randtop", "one of shuffle, swap"),
}


@pytest.mark.parametrize("variable", sorted(BAD))
def test_a_bad_value_is_a_settings_error_naming_variable_value_and_expectation(
    monkeypatch, variable
):
    from rankstream.stream.settings import SettingsError

    text, expected = BAD[variable]
    monkeypatch.setenv(variable, text)
    with pytest.raises(SettingsError) as error:
        Settings.from_env()
    assert (error.value.variable, error.value.value) == (variable, text)
    assert str(error.value).startswith(f"{variable} must be ")
    assert expected in str(error.value) and repr(text) in str(error.value)


def test_a_sentinel_url_names_the_sentinels_the_master_and_the_db(monkeypatch):
    from rankstream.stream.settings import parse_sentinel_url

    url = "redis+sentinel://:s3cret@10.0.0.1:26379,sentinel-b:26380/rankstream/2"
    monkeypatch.setenv("RANKSTREAM_REDIS_URL", url)
    assert Settings.from_env().redis_url == url
    target = parse_sentinel_url(url)
    assert target.sentinels == (("10.0.0.1", 26379), ("sentinel-b", 26380))
    assert (target.master, target.db, target.password) == ("rankstream", 2, "s3cret")
    assert parse_sentinel_url("redis+sentinel://h:1/m").db == 0


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://h:1",  # no master name
        "redis+sentinel://h/m",  # no port
        "redis+sentinel://h:1,h:99999/m",  # port out of range
        "redis+sentinel://h:1/m/zero",  # db not a number
    ],
)
def test_a_bad_sentinel_url_is_refused_naming_the_variable(monkeypatch, url):
    monkeypatch.setenv("RANKSTREAM_REDIS_URL", url)
    with pytest.raises(ValueError, match="RANKSTREAM_REDIS_URL must be redis\\+sentinel://"):
        Settings.from_env()


def test_every_topic_is_named_from_the_one_list_of_kinds():
    from rankstream.stream.settings import TOPIC_KINDS

    settings = Settings(topic_prefix="p")
    assert settings.topics == [f"p.{kind}" for kind in TOPIC_KINDS]
    assert (settings.impressions_topic, settings.clicks_topic) == ("p.impressions", "p.clicks")
    with pytest.raises(ValueError, match="unknown topic kind"):
        settings.topic("nope")
