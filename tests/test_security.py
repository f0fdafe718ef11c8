"""Security rules kept true by tests (docs/reference/security.md explains each).

* Nothing deserialises executable data: no pickle-family import or call anywhere in the
  shipped packages (AST scan), and every `np.load` the code makes at run time passes
  allow_pickle=False (the loaders are run with `np.load` instrumented).
* Redis password / ACL user / TLS and Kafka SASL / SSL reach the clients: read by
  `Settings.from_env`, present in the kafka-python config (keys the client accepts) and
  in the redis-py connection pool, and a real password-protected (and ACL) redis-server
  is reachable only with them.
* Secrets come from the environment: the source and deploy files hold no hard-coded
  password, token or key (the env example's placeholders are listed and allowed).
* /metrics binds to 127.0.0.1 unless configured; containers run as a non-root user.
"""

from __future__ import annotations

import ast
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rankstream.stream.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ranking", "simulators", "stream", "workers", "rankstream")


def _python_files() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 30, "the source scan found suspiciously few files"
    return files


# --- nothing unpickles -------------------------------------------------------------------
_BANNED_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "dill",
    "cloudpickle",
    "shelve",
    "marshal",
    "jsonpickle",
}
_BANNED_CALLS = {
    ("joblib", "load"),
    ("pandas", "read_pickle"),
    ("pd", "read_pickle"),
    ("marshal", "loads"),
    ("marshal", "load"),
    ("yaml", "unsafe_load"),
    ("yaml", "full_load"),
    ("torch", "load"),
    ("np", "fromfile"),
}
_SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader"}


def _dotted(node: ast.AST) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def unsafe_deserialisation(source: str) -> list[str]:
    """Every pickle-family import or unsafe load call in `source`, as 'line: what'."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for name in names:
                if name.split(".")[0] in _BANNED_MODULES:
                    problems.append(f"{node.lineno}: import {name}")
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        keywords = {k.arg: k.value for k in node.keywords}
        if name[-2:] in _BANNED_CALLS or (len(name) == 1 and name[0] == "read_pickle"):
            problems.append(f"{node.lineno}: {'.'.join(name)}()")
        if name[-1:] == ("load",) and name[:1] in (("np",), ("numpy",)):
            flag = keywords.get("allow_pickle")
            if not (isinstance(flag, ast.Constant) and flag.value is False):
                problems.append(f"{node.lineno}: {'.'.join(name)}() without allow_pickle=False")
        if name[-1:] == ("load",) and name[:1] == ("yaml",):
            loader = keywords.get("Loader", node.args[1] if len(node.args) > 1 else None)
            if loader is None or _dotted(loader)[-1:][0] not in _SAFE_YAML_LOADERS:
                problems.append(f"{node.lineno}: yaml.load() without a safe Loader")
    return problems


def test_the_scanner_finds_every_unsafe_form() -> None:
    bad = """
import pickle
from cloudpickle import loads
import dill as d
import numpy as np, yaml, joblib, marshal, pandas as pd
np.load("x.npy")
np.load("x.npy", allow_pickle=True)
joblib.load("m")
pd.read_pickle("f")
marshal.loads(b"")
yaml.load(text)
yaml.load(text, Loader=yaml.Loader)
yaml.unsafe_load(text)
"""
    good = """
import numpy as np, yaml, json
np.load("x.npy", allow_pickle=False, mmap_mode="r")
yaml.load(text, Loader=yaml.SafeLoader)
yaml.safe_load(text)
json.loads("{}")
"""
    flagged = {int(problem.split(":")[0]) for problem in unsafe_deserialisation(bad)}
    assert flagged == set(range(2, 14))  # every line but the blank first one
    assert unsafe_deserialisation(good) == []


def test_no_source_file_unpickles() -> None:
    found = {
        str(p.relative_to(ROOT)): problems
        for p in _python_files()
        if (problems := unsafe_deserialisation(p.read_text()))
    }
    assert found == {}


def test_every_np_load_at_run_time_refuses_pickles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Build then reload a small collection and its index with np.load instrumented."""
    from rankstream.simulators.collection import Collection
    from rankstream.simulators.retrieval import CandidateIndex

    calls: list[object] = []
    real_load = np.load

    def checked_load(*args: object, **kwargs: object) -> object:
        calls.append(kwargs.get("allow_pickle", "unset"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(np, "load", checked_load)
    for _ in range(2):  # the second round loads the cache the first one wrote
        collection = Collection.load_or_build(tmp_path, progress=False, n_images=3000, seed=1)
        CandidateIndex.load_or_build(collection, tmp_path, seed=1, progress=False)
    assert calls, "the cache was never loaded: the check saw nothing"
    assert set(calls) == {False}


# --- security settings pass through ----------------------------------------------------
SECURE_ENV = {
    "RANKSTREAM_KAFKA_BOOTSTRAP": "kafka-a:9093,kafka-b:9093",
    "RANKSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "RANKSTREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "RANKSTREAM_KAFKA_SASL_USERNAME": "worker",
    "RANKSTREAM_KAFKA_SASL_PASSWORD": "kafka-test-secret",
    "RANKSTREAM_KAFKA_SSL_CAFILE": "/etc/rankstream/ca.pem",
    "RANKSTREAM_KAFKA_SSL_CERTFILE": "/etc/rankstream/worker.pem",
    "RANKSTREAM_KAFKA_SSL_KEYFILE": "/etc/rankstream/worker.key",
    "RANKSTREAM_REDIS_URL": "rediss://rankworker@redis.example:6380/2?ssl_cert_reqs=required",
    "RANKSTREAM_REDIS_PASSWORD": "redis-test-secret",
    "RANKSTREAM_METRICS_HOST": "0.0.0.0",
}


@pytest.fixture
def secure_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name, value in SECURE_ENV.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env()


def test_settings_read_every_security_variable(secure_settings: Settings) -> None:
    s = secure_settings
    assert (s.kafka_security_protocol, s.kafka_sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (s.kafka_sasl_username, s.kafka_sasl_password) == ("worker", "kafka-test-secret")
    assert s.kafka_ssl_cafile == "/etc/rankstream/ca.pem"
    assert s.kafka_ssl_certfile == "/etc/rankstream/worker.pem"
    assert s.kafka_ssl_keyfile == "/etc/rankstream/worker.key"
    assert s.redis_url == SECURE_ENV["RANKSTREAM_REDIS_URL"]
    assert s.redis_password == "redis-test-secret" and s.metrics_host == "0.0.0.0"


def test_kafka_clients_get_sasl_and_ssl(secure_settings: Settings) -> None:
    """The shared client config carries them, under names every kafka-python client takes."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    from rankstream.stream.kafka_transport import KafkaTransport, client_config

    config = client_config(secure_settings)
    assert config["bootstrap_servers"] == ["kafka-a:9093", "kafka-b:9093"]
    assert config["security_protocol"] == "SASL_SSL"
    assert config["sasl_mechanism"] == "SCRAM-SHA-512"
    assert config["sasl_plain_username"] == "worker"
    assert config["sasl_plain_password"] == "kafka-test-secret"
    assert config["ssl_cafile"] == "/etc/rankstream/ca.pem"
    assert config["ssl_certfile"] == "/etc/rankstream/worker.pem"
    assert config["ssl_keyfile"] == "/etc/rankstream/worker.key"
    for client in (KafkaProducer, KafkaConsumer, KafkaAdminClient):
        assert set(config) <= set(client.DEFAULT_CONFIG), client.__name__
    assert KafkaTransport(secure_settings)._config == config  # what producers/consumers get


def test_plaintext_kafka_sends_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from rankstream.stream.kafka_transport import client_config

    monkeypatch.setenv("RANKSTREAM_KAFKA_BOOTSTRAP", "localhost:9092")
    config = client_config(Settings.from_env())
    assert config["security_protocol"] == "PLAINTEXT"
    assert not {k for k in config if k.startswith(("sasl", "ssl"))}


def test_redis_client_gets_tls_acl_user_and_password(secure_settings: Settings) -> None:
    import redis

    from rankstream.stream.redis_store import redis_client

    client = redis_client(secure_settings.redis_url, secure_settings.redis_password)
    pool = client.connection_pool
    assert issubclass(pool.connection_class, redis.SSLConnection)  # rediss:// = TLS
    kwargs = pool.connection_kwargs
    assert kwargs["username"] == "rankworker" and kwargs["password"] == "redis-test-secret"
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("redis.example", 6380, 2)


@pytest.fixture
def protected_redis(tmp_path: Path) -> Iterator[str]:
    """A throwaway redis-server with a password and an ACL user; yields host:port."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
            "--requirepass",
            "default-test-pw",
            "--user",
            "rankworker",
            "on",
            ">acl-test-pw",
            "~*",
            "&*",
            "+@all",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the password-protected redis-server did not start")
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _redis_store(url: str, password: str | None, monkeypatch: pytest.MonkeyPatch):
    """A RedisModelStore configured through the environment, as a worker gets it."""
    from rankstream.stream.redis_store import RedisModelStore

    monkeypatch.setenv("RANKSTREAM_REDIS_URL", url)
    if password is None:
        monkeypatch.delenv("RANKSTREAM_REDIS_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("RANKSTREAM_REDIS_PASSWORD", password)
    return RedisModelStore(Settings.from_env())


@pytest.mark.services
def test_password_and_acl_user_from_the_environment_open_a_protected_redis(
    protected_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    from rankstream.stream.errors import CredentialsError

    def refused(url: str, password: str | None) -> None:
        store = _redis_store(url, password, monkeypatch)
        try:
            with pytest.raises(CredentialsError) as info:
                store.latest_versions()
            assert isinstance(info.value.__cause__, redis.AuthenticationError)
        finally:
            store.close()

    refused(f"redis://{protected_redis}/0", None)
    default_user = _redis_store(f"redis://{protected_redis}/0", "default-test-pw", monkeypatch)
    version = default_user.save(
        "m", kind="t", meta={}, arrays={"w": np.ones(3)}, offsets={}, expected_version=0
    )
    acl_user = _redis_store(f"redis://rankworker@{protected_redis}/0", "acl-test-pw", monkeypatch)
    assert acl_user.load("m").version == version  # type: ignore[union-attr]
    default_user.close()
    acl_user.close()
    refused(f"redis://rankworker@{protected_redis}/0", "default-test-pw")


@pytest.mark.services
def test_a_wrong_redis_password_fails_fast_instead_of_being_retried(
    protected_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither redis-py's retry nor the workers' retry loop retries refused credentials."""
    import logging
    import threading

    import redis

    from rankstream.stream.errors import CredentialsError
    from rankstream.workers.resilience import retry_until_stopped, transient_errors

    connects = []
    real_connect = redis.connection.AbstractConnection.connect
    monkeypatch.setattr(
        redis.connection.AbstractConnection,
        "connect",
        lambda self, *a, **k: connects.append(1) or real_connect(self, *a, **k),
    )
    store = _redis_store(f"redis://{protected_redis}/0", "wrong-test-pw", monkeypatch)
    attempts = []

    def action() -> None:
        attempts.append(1)
        store.latest_versions()

    try:
        with pytest.raises(CredentialsError, match="redis refused the credentials") as info:
            retry_until_stopped(
                "load models",
                action,
                threading.Event(),
                transient_errors(),
                logging.getLogger("test"),
            )
    finally:
        store.close()
    assert not isinstance(info.value, transient_errors())
    assert "RANKSTREAM_REDIS_" in str(info.value)
    assert len(attempts) == 1 and len(connects) == 1  # one try, no retries at either level


def test_the_workers_retry_loop_raises_refused_credentials_at_once() -> None:
    """A client auth error (here Kafka's SASL one) inside a transport call reaches the
    worker loop as CredentialsError, which it does not retry."""
    import logging
    import threading

    import kafka.errors

    from rankstream.stream.errors import CredentialsError
    from rankstream.stream.kafka_transport import kafka_call
    from rankstream.workers.resilience import retry_until_stopped, transient_errors

    attempts = []

    @kafka_call
    def action() -> None:
        attempts.append(1)
        raise kafka.errors.SaslAuthenticationFailedError("bad SCRAM password")

    with pytest.raises(CredentialsError, match="kafka refused the credentials"):
        retry_until_stopped(
            "poll", action, threading.Event(), transient_errors(), logging.getLogger("test")
        )
    assert attempts == [1]


# --- no hard-coded secrets ---------------------------------------------------------------
_SECRET_NAME = re.compile(r"(passw(or)?d|passphrase|secret|token|api[_-]?key|credential)", re.I)
_KEY_MATERIAL = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),  # GitHub token
    re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}\b"),  # Slack token
]
_URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+]*://[^/\s:@'\"\[\]]+:([^/\s@'\"$\[\]]+)@")
_URL_PLACEHOLDERS = {"pass", "password", "PASSWORD", "secret", "..."}
_ASSIGNMENT = re.compile(r"^\s*-?\s*([A-Za-z0-9_.-]+)\s*[:=]\s*['\"]?([^'\"\s#]*)")
# Obviously-fake placeholders the deploy files may carry (SECURITY.md). None today:
# deploy/.env.example leaves every secret empty and compose requires it (`${VAR:?}`).
ALLOWED_PLACEHOLDERS: set[tuple[str, str, str]] = set()


def _deploy_files() -> list[Path]:
    return sorted(
        p
        for p in (ROOT / "deploy").rglob("*")
        if p.is_file() and "target" not in p.parts and p.suffix not in (".jar", ".png")
    )


def python_secrets(source: str) -> list[str]:
    """String literals assigned or passed to a secret-looking name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        pairs: list[tuple[str, ast.AST | None]] = []
        if isinstance(node, ast.Assign):
            pairs = [(_dotted(t)[-1] if _dotted(t) else "", node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign):
            pairs = [(_dotted(node.target)[-1] if _dotted(node.target) else "", node.value)]
        elif isinstance(node, ast.Call):
            pairs = [(k.arg or "", k.value) for k in node.keywords]
        elif isinstance(node, ast.Dict):
            pairs = [
                (k.value, v)
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
        for name, value in pairs:
            if (
                _SECRET_NAME.search(name)
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and value.value.strip()
            ):
                found.append(f"{getattr(node, 'lineno', '?')}: {name} = {value.value!r}")
    return found


def text_secrets(relative: str, text: str) -> list[str]:
    """Key material, credentials in URLs, and (outside Python, which `python_secrets`
    reads properly) literal values of secret-looking keys."""
    found = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        found += [f"{lineno}: key material" for rx in _KEY_MATERIAL if rx.search(line)]
        for match in _URL_CREDENTIALS.finditer(line):
            if match.group(1) not in _URL_PLACEHOLDERS:
                found.append(f"{lineno}: credentials in a URL ({match.group(0)})")
        assignment = None if relative.endswith(".py") else _ASSIGNMENT.match(line)
        if assignment and _SECRET_NAME.search(assignment.group(1)):
            key, value = assignment.groups()
            literal = value and not value.startswith(("$", "${")) and "$$" not in value
            if literal and (relative, key, value) not in ALLOWED_PLACEHOLDERS:
                found.append(f"{lineno}: {key} = {value!r}")
    return found


def test_the_secret_scanners_find_planted_secrets() -> None:
    assert (
        len(
            python_secrets(
                'password = "hunter2"\nconnect(api_key="k-123")\n'
                'cfg = {"redis_password": "x"}\npassword: str | None = None\n'
                'token = ""\n'
            )
        )
        == 3
    )
    planted = (
        "REDIS_PASSWORD=hunter2\nurl: redis://user:hunter2@host:6379\n"
        "-----BEGIN RSA PRIVATE KEY-----\nGF_ADMIN_PASSWORD: ${GF_PW}\n"
        "  - REDIS_PASSWORD=$${X}\n"
    )
    assert len(text_secrets("deploy/x.yml", planted)) == 3


def test_no_hard_coded_secrets_in_source_or_deploy_files() -> None:
    found = {}
    for path in _python_files():
        relative = str(path.relative_to(ROOT))
        problems = python_secrets(path.read_text()) + text_secrets(relative, path.read_text())
        if problems:
            found[relative] = problems
    for path in _deploy_files():
        relative = str(path.relative_to(ROOT))
        if problems := text_secrets(relative, path.read_text(errors="replace")):
            found[relative] = problems
    assert found == {}


# --- listening addresses and container users ----------------------------------------------
def _listening_address(port: int) -> str:
    """The local IPv4 address a LISTEN socket on `port` is bound to (from /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, _remote, state = line.split()[1:4]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":
            return socket.inet_ntoa(bytes.fromhex(address)[::-1])
    raise AssertionError(f"nothing listens on port {port}")


def test_metrics_bind_to_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from rankstream.telemetry.prometheus_metrics import start_metrics_server

    monkeypatch.delenv("RANKSTREAM_METRICS_HOST", raising=False)
    monkeypatch.setenv("RANKSTREAM_METRICS_PORT", "0")
    port = start_metrics_server(Settings.from_env())
    assert port is not None and _listening_address(port) == "127.0.0.1"


def test_metrics_bind_elsewhere_only_when_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    from rankstream.telemetry.prometheus_metrics import start_metrics_server

    monkeypatch.setenv("RANKSTREAM_METRICS_HOST", "0.0.0.0")
    monkeypatch.setenv("RANKSTREAM_METRICS_PORT", "0")
    port = start_metrics_server(Settings.from_env())
    assert port is not None and _listening_address(port) == "0.0.0.0"


def _final_stage_users(dockerfile: str) -> list[str]:
    stages = re.split(r"(?im)^FROM\s", dockerfile)
    return re.findall(r"(?im)^USER\s+(\S+)", stages[-1])


def test_containers_run_as_a_non_root_user() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    users = _final_stage_users(dockerfile)
    assert users, "the final stage never switches away from root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    uid = re.search(rf"useradd[^\n]*--uid\s+(\d+)[^\n]*\b{re.escape(user)}\b", dockerfile)
    assert uid is None or int(uid.group(1)) != 0
    compose = (ROOT / "deploy" / "docker-compose.yml").read_text()
    assert not re.search(r"(?m)^\s*user:\s*['\"]?(root|0)\b", compose)
    assert not re.search(r"(?m)^\s*privileged:\s*true", compose)


def test_compose_publishes_ports_on_loopback_only() -> None:
    """Kafka (plaintext) and the UIs are reachable from the host, never from the network."""
    compose = (ROOT / "deploy" / "docker-compose.yml").read_text()
    published = re.findall(
        r"(?m)^\s*-\s*['\"]?([0-9.:]+:\d+)['\"]?\s*(#.*)?$",
        compose.split("ports:", 1)[1] if "ports:" in compose else "",
    )
    assert published, "no published ports found: the scan is broken"
    assert all(p.startswith("127.0.0.1:") for p, _ in published), published
