"""Keep deploy/docker-compose.yml true without a Docker engine.

No engine runs here, so `docker compose config` cannot check the file; these tests
check what would break a `docker compose up` instead: the structure, the start order,
every container command against the real CLI parser, every RANKSTREAM_* name against
`Settings.from_env`, Prometheus' targets against the services, and the image's user
and entrypoint.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rankstream import cli
from rankstream.simulators.engine_rankers import engine_ranker
from rankstream.stream.settings import ENV_PREFIX, Settings
from rankstream.workers.options import from_arguments, variables_for
from rankstream.workers.simulator_options import SimulateOptions

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"  # the secrets a user sets in deploy/.env
SETTINGS_ENV = DEPLOY / "rankstream.env"  # the shared, non-secret settings
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
FASHION_MNIST_OVERRIDE = DEPLOY / "docker-compose.fashion-mnist.yml"
CLICKS_OVERRIDE = DEPLOY / "docker-compose.clicks.yml"
DOCKERIGNORE = REPO / ".dockerignore"

INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


# -- readers (shared with tests/test_grafana.py) ----------------------------------------


def load_compose() -> dict[str, Any]:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(compose, dict), "docker-compose.yml is not a YAML mapping"
    return compose


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a compose env file (comments and blank lines skipped)."""
    env: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), (
            f"{path.name}:{number}: not KEY=VALUE: {line!r}"
        )
        env[key] = value
    return env


def service_environment(service: dict[str, Any]) -> dict[str, str]:
    """`environment:` as a dict, whichever of the two compose forms it uses."""
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        return dict(item.partition("=")[::2] for item in environment)
    return {key: str(value) for key, value in environment.items()}


def env_file_paths(service: dict[str, Any]) -> list[tuple[Path, bool]]:
    """(path, required) for each env file of a service, resolved against deploy/."""
    entries = service.get("env_file") or []
    if isinstance(entries, str):
        entries = [entries]
    paths = []
    for entry in entries:
        if isinstance(entry, str):
            paths.append((DEPLOY / entry, True))
        else:
            paths.append((DEPLOY / entry["path"], bool(entry.get("required", True))))
    return paths


def effective_environment(service: dict[str, Any]) -> dict[str, str]:
    """What a container sees: env files, then `environment:`, where a required ${VAR}
    (which compose takes from deploy/.env) stands for a value the user sets."""
    env: dict[str, str] = {}
    for path, _required in env_file_paths(service):
        if path.exists():
            env.update(read_env_file(path))
    for key, value in service_environment(service).items():
        env[key] = INTERPOLATION.sub(lambda m: f"<{m.group(1)}>", value)
    return env


def is_our_image(service: dict[str, Any]) -> bool:
    build = service.get("build")
    return isinstance(build, dict) and build.get("dockerfile") == "deploy/Dockerfile"


def app_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run our image (a `rankstream` command each)."""
    return {name: s for name, s in compose["services"].items() if is_our_image(s)}


def metrics_targets(compose: dict[str, Any]) -> dict[str, str]:
    """service -> "service:port" for every service of ours that exports /metrics."""
    return {
        name: f"{name}:{effective_environment(s)[ENV_PREFIX + 'METRICS_PORT']}"
        for name, s in app_services(compose).items()
        if ENV_PREFIX + "METRICS_PORT" in effective_environment(s)
    }


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """target -> condition (the short list form means service_started)."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


COMPOSE = load_compose()
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
APP_SERVICES = app_services(COMPOSE)


# -- structure ----------------------------------------------------------------------------


def test_compose_has_every_part_of_the_pipeline() -> None:
    commands = {tuple(s["command"][:2]) for s in APP_SERVICES.values()}
    assert {("worker", "online"), ("worker", "batch"), ("worker", "evaluator")} <= commands
    assert any(c[0] == "simulate" for c in commands)
    images = {name: str(s.get("image", "")) for name, s in SERVICES.items()}
    assert re.fullmatch(r"apache/kafka:3\.9\.\d+", images["kafka"])
    assert images["redis"].startswith("redis:")
    assert images["prometheus"].startswith("prom/prometheus:")
    assert images["grafana"].startswith("grafana/grafana")


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_has_an_image_and_a_healthcheck(name: str) -> None:
    service = SERVICES[name]
    assert service.get("image") or service.get("build"), f"{name}: no image or build"
    if "build" in service:
        context = DEPLOY / service["build"]["context"]
        assert (context / service["build"]["dockerfile"]).is_file()
    check = service.get("healthcheck")
    assert check and not check.get("disable"), f"{name}: no healthcheck"
    assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1


def test_depends_on_targets_exist_are_healthy_and_acyclic() -> None:
    for name, service in SERVICES.items():
        for target, condition in depends_on(service).items():
            assert target in SERVICES, f"{name} depends on unknown service {target}"
            assert condition == "service_healthy", f"{name} -> {target}: {condition}"
            assert "healthcheck" in SERVICES[target]
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(name: str) -> None:
        assert name not in visiting, f"depends_on cycle through {name}"
        if name in done:
            return
        visiting.add(name)
        for target in depends_on(SERVICES[name]):
            visit(target)
        visiting.discard(name)
        done.add(name)

    for name in SERVICES:
        visit(name)


def test_workers_wait_for_kafka_and_redis_and_the_simulator_for_the_workers() -> None:
    for name, service in APP_SERVICES.items():
        assert {"kafka", "redis"} <= set(depends_on(service)), name
    simulator = next(n for n, s in APP_SERVICES.items() if s["command"][0] == "simulate")
    consumers = {n for n, s in APP_SERVICES.items() if s["command"][0] == "worker"}
    assert consumers <= set(depends_on(SERVICES[simulator]))


def test_named_volumes_are_declared_and_used() -> None:
    declared = set(COMPOSE.get("volumes") or {})
    used: set[str] = set()
    for name, service in SERVICES.items():
        for mount in service.get("volumes") or []:
            source = mount.split(":", 1)[0]
            if source.startswith((".", "/")):
                assert (DEPLOY / source).exists(), f"{name}: bind source {source} missing"
            else:
                assert source in declared, f"{name}: volume {source} not declared"
                used.add(source)
    assert used == declared, f"declared but unused: {declared - used}"


def test_redis_appends_every_write_and_keeps_it_on_a_volume() -> None:
    redis = SERVICES["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--appendfsync everysec" in command
    assert '--requirepass "$$RANKSTREAM_REDIS_PASSWORD"' in command  # $$: container's env
    assert "exit 78" in command  # a placeholder password is refused (test_compose_engine)
    assert any(m.split(":")[1] == "/data" for m in redis["volumes"])


def test_kafka_runs_kraft_and_advertises_what_the_workers_use() -> None:
    env = service_environment(SERVICES["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    advertised = env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    bootstrap = read_env_file(SETTINGS_ENV)[ENV_PREFIX + "KAFKA_BOOTSTRAP"]
    assert any(listener.endswith("://" + bootstrap) for listener in advertised)
    assert bootstrap.split(":")[0] == "kafka"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_container_runs_as_a_non_root_user(name: str) -> None:
    service = SERVICES[name]
    if is_our_image(service):
        assert "user" not in service or service["user"] not in ("root", "0")
        return  # the image's USER (test_dockerfile_*) applies
    assert str(service.get("user", "root")).split(":")[0] not in ("root", "0"), name


# -- commands against the CLI --------------------------------------------------------------


def _module_for(command: list[str]) -> str:
    for depth in range(len(command), 0, -1):
        entry = cli.COMMANDS.get(tuple(command[:depth]))
        if entry:
            return entry[0]
    raise AssertionError(f"{command} is not a registered rankstream command")


@pytest.mark.parametrize("name", sorted(APP_SERVICES))
def test_service_command_is_one_the_cli_accepts(name: str) -> None:
    command = [str(word) for word in APP_SERVICES[name]["command"]]
    module = _module_for(command)
    try:
        args = cli.build_parser().parse_args(command)
    except SystemExit as exc:
        raise AssertionError(f"{name}: `rankstream {' '.join(command)}` rejected") from exc
    assert isinstance(args, argparse.Namespace) and args._module == module


def test_the_simulator_serves_the_champion() -> None:
    (command,) = [s["command"] for s in APP_SERVICES.values() if s["command"][0] == "simulate"]
    assert command[command.index("--serving") + 1] == "champion"


def test_the_fashion_mnist_override_changes_only_the_simulators_collection() -> None:
    override = yaml.safe_load(FASHION_MNIST_OVERRIDE.read_text())
    assert list(override) == ["services"] and list(override["services"]) == ["simulator"]
    assert list(override["services"]["simulator"]) == ["command"]
    command = [str(word) for word in override["services"]["simulator"]["command"]]
    base = [str(word) for word in SERVICES["simulator"]["command"]]
    at = command.index("--collection")
    assert command[at + 1] == "fashion-mnist"
    assert command[:at] + command[at + 2 :] == base  # every other option as in the main file
    args = cli.build_parser().parse_args(command)
    assert args.collection == "fashion-mnist" and args._module == _module_for(base)


def test_the_clicks_override_makes_the_simulators_users_click() -> None:
    """Only the simulator's feedback, its stop option and its health check's progress
    change; its serving, rate and everything else are the main file's. The share of
    interleaved impressions is the one serve reads, from rankstream.env."""
    override = yaml.safe_load(CLICKS_OVERRIDE.read_text())
    assert list(override) == ["services"] and list(override["services"]) == ["simulator"]
    simulator = override["services"]["simulator"]
    assert sorted(simulator) == ["command", "environment", "healthcheck"]
    command = [str(word) for word in simulator["command"]]
    base = [str(word) for word in SERVICES["simulator"]["command"]]
    args, main = cli.build_parser().parse_args(command), cli.build_parser().parse_args(base)
    assert args._module == main._module and args.feedback.startswith("clicks:")
    assert main.feedback == "judged" and args.queries == main.triplets
    differ = {k for k, v in vars(args).items() if vars(main).get(k) != v} - {"_options_given"}
    # --queries replaces --triplets (clicks make no triplets: the join makes them)
    assert differ == {"feedback", "queries", "triplets"}, differ
    # the simulated engine ranks with one of its own (`simulators.engine_rankers`): weaker
    # than Uni-Con, so the learned models have an incumbent to beat
    assert simulator["environment"] == {"RANKSTREAM_SIMULATE_ENGINE_RANKER": "single-descriptor"}
    options = from_arguments(SimulateOptions, args, variables_for("simulate"),
                             environ=simulator["environment"])  # fmt: skip
    assert engine_ranker(options.engine_ranker).enabled and options.engine_ranker != "none"
    test = [str(word) for word in simulator["healthcheck"]["test"]]
    main_test = [str(word) for word in SERVICES["simulator"]["healthcheck"]["test"]]
    assert test[test.index("--progress") + 1] == "rankstream_clicks_produced_total"
    assert test[: test.index("--progress")] == main_test[: main_test.index("--progress")]
    env = read_env_file(SETTINGS_ENV)
    assert 0 < float(env[f"{ENV_PREFIX}INTERLEAVING_SHARE"]) < 1


# -- settings ------------------------------------------------------------------------------


def _rankstream_names() -> set[str]:
    names = {k for k in read_env_file(SETTINGS_ENV) if k.startswith(ENV_PREFIX)}
    names |= {k for k in read_env_file(ENV_EXAMPLE) if k.startswith(ENV_PREFIX)}
    for service in SERVICES.values():
        names |= {k for k in service_environment(service) if k.startswith(ENV_PREFIX)}
    return names


VALID_EXAMPLES = {
    f"{ENV_PREFIX}KAFKA_BOOTSTRAP": "kafka:9092",
    f"{ENV_PREFIX}REDIS_URL": "redis://redis:6379/0",
    f"{ENV_PREFIX}PROMETHEUS_URL": "http://prometheus:9090",
    f"{ENV_PREFIX}KAFKA_SECURITY_PROTOCOL": "SSL",
    f"{ENV_PREFIX}KAFKA_SASL_MECHANISM": "PLAIN",
    f"{ENV_PREFIX}INTERLEAVING_SHARE": "0.5",
}


@pytest.mark.parametrize("variable", sorted(_rankstream_names()))
def test_every_rankstream_variable_is_read_by_settings(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _rankstream_names():
        monkeypatch.delenv(name, raising=False)
    baseline = Settings.from_env()
    # a value each variable's check accepts (the addresses are checked; "12345" fits the rest)
    monkeypatch.setenv(variable, VALID_EXAMPLES.get(variable, "12345"))
    assert Settings.from_env() != baseline, f"Settings.from_env ignores {variable}"


@pytest.mark.parametrize("name", sorted(APP_SERVICES))
def test_each_service_environment_makes_valid_settings(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = effective_environment(APP_SERVICES[name])
    for key, value in env.items():
        if key.startswith(ENV_PREFIX):
            monkeypatch.setenv(key, value)
    settings = Settings.from_env()
    assert settings.kafka_bootstrap and settings.redis_url and settings.redis_password
    assert settings.metrics_host == "0.0.0.0"  # Prometheus scrapes from another container
    assert settings.metrics_port is not None


def test_env_files_exist_and_hold_no_secrets() -> None:
    """Containers read only the committed settings file; deploy/.env (the secrets) is
    compose's interpolation source, never an env_file that every container would get."""
    for name, service in SERVICES.items():
        for path, required in env_file_paths(service):
            assert path == SETTINGS_ENV and path.exists() and required, (name, path)
    for key in read_env_file(SETTINGS_ENV):
        assert not re.search(r"PASSWORD|SECRET|TOKEN|KEY", key), f"secret {key} in {SETTINGS_ENV}"


def test_every_secret_is_required_and_has_no_default() -> None:
    """Each ${VAR} is in .env.example, empty there, and required (`:?`): compose refuses
    to start until the user sets it in deploy/.env."""
    example = read_env_file(ENV_EXAMPLE)
    interpolated = {m.group(1): m for m in INTERPOLATION.finditer(COMPOSE_FILE.read_text())}
    assert set(interpolated) == set(example)
    for name, match in interpolated.items():
        assert match.group(2) == ":?", f"${{{name}}} must be required (:?)"
        assert example[name] == "", f"{name} has a default in .env.example"


def test_secrets_reach_only_the_services_that_need_them() -> None:
    def secrets_of(service: dict[str, Any]) -> set[str]:
        return {m.group(1) for v in service_environment(service).values()
                for m in INTERPOLATION.finditer(v)}  # fmt: skip

    talks_to_redis = {"redis", *APP_SERVICES}
    for name, service in SERVICES.items():
        expected = {"RANKSTREAM_REDIS_PASSWORD"} if name in talks_to_redis else set()
        if name == "grafana":
            expected = {"GRAFANA_ADMIN_PASSWORD"}
        assert secrets_of(service) == expected, name


def test_metrics_ports_are_distinct() -> None:
    ports = [t.split(":")[1] for t in metrics_targets(COMPOSE).values()]
    assert len(ports) == len(set(ports)) == len(APP_SERVICES)


# -- Prometheus ------------------------------------------------------------------------------


def _scrape_targets() -> dict[str, set[str]]:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    jobs: dict[str, set[str]] = {}
    for job in config["scrape_configs"]:
        jobs[job["job_name"]] = {t for sc in job["static_configs"] for t in sc["targets"]}
    return jobs


def test_prometheus_scrapes_exactly_the_services_metrics_ports() -> None:
    jobs = _scrape_targets()
    assert jobs.pop("prometheus") == {"localhost:9090"}
    assert jobs == {name: {target} for name, target in metrics_targets(COMPOSE).items()}


def test_prometheus_url_and_mounted_config_match_the_prometheus_service() -> None:
    prometheus = SERVICES["prometheus"]
    mounts = dict(m.rsplit(":", 2)[:2] for m in prometheus["volumes"] if m.startswith("."))
    config_path = next(a for a in prometheus["command"] if a.startswith("--config.file="))
    assert mounts["./prometheus/prometheus.compose.yml"] == config_path.split("=", 1)[1]
    listen = next(a for a in prometheus["command"] if a.startswith("--web.listen-address="))
    url = read_env_file(SETTINGS_ENV)[ENV_PREFIX + "PROMETHEUS_URL"]
    assert url == "http://prometheus" + listen.split("=", 1)[1]


def test_promtool_accepts_the_compose_scrape_config(services) -> None:
    """`services` installs Debian's prometheus package, which ships promtool."""
    assert shutil.which("promtool"), "promtool missing although prometheus is installed"
    result = subprocess.run(
        ["promtool", "check", "config", str(PROMETHEUS_CONFIG)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


# -- Dockerfile ----------------------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def _final_stage() -> list[tuple[str, str]]:
    instructions = _dockerfile_instructions()
    last_from = max(i for i, (k, _) in enumerate(instructions) if k == "FROM")
    return instructions[last_from:]


def test_dockerfile_is_multi_stage_and_copies_only_the_built_environment() -> None:
    instructions = _dockerfile_instructions()
    assert sum(k == "FROM" for k, _ in instructions) >= 2
    copies = [args for k, args in _final_stage() if k == "COPY"]
    assert copies and all(args.startswith("--from=") for args in copies)


def test_dockerfile_runs_the_console_script_as_a_non_root_user() -> None:
    stage = _final_stage()
    users = [args for k, args in stage if k == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    entrypoints = [yaml.safe_load(args) for k, args in stage if k == "ENTRYPOINT"]
    # the wrapper refuses a placeholder Redis password, then execs the console script
    assert entrypoints and entrypoints[-1] == ["rankstream-entrypoint"]
    wrapper = (DEPLOY / "image" / "entrypoint.sh").read_text()
    assert wrapper.rstrip().endswith('exec rankstream "$@"')
    assert scripts["rankstream"] == "rankstream.cli:program"


def test_the_image_has_fashion_mnist_unless_built_without() -> None:
    from rankstream.simulators.fashion_mnist import DEBIAN_PACKAGE

    stage = _final_stage()
    args = [a for k, a in stage if k == "ARG"]
    assert "FASHION_MNIST=1" in args  # on by default
    (install,) = [a for k, a in stage if k == "RUN" and DEBIAN_PACKAGE in a]
    assert '"$FASHION_MNIST"' in install and "rm -rf /var/lib/apt/lists/*" in install
    keywords = [k for k, _ in stage]
    # installed before the environment is copied in: code changes keep the layer
    assert keywords.index("ARG") < keywords.index("COPY")


def _dockerignored() -> set[str]:
    return {
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


def _installed_top_level_folders() -> set[str]:
    """The top-level folders pyproject.toml installs code from (package-dir or find)."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {d.split("/")[0] for d in (setuptools.get("package-dir") or {}).values() if d}
    packages = setuptools.get("packages") or {}
    find = packages.get("find", {}) if isinstance(packages, dict) else {}
    folders |= {p.rstrip("*").split(".")[0] for p in find.get("include", [])}
    return {f for f in folders if f and (REPO / f).is_dir()}


def test_docker_context_has_what_the_build_copies_and_no_secrets() -> None:
    ignored = _dockerignored()
    assert {".git", ".venv", "deploy/.env"} <= ignored
    copies = [args for k, args in _dockerfile_instructions() if k == "COPY"]
    assert ". ." in copies, "the build stage copies the whole context (every package)"
    for args in copies:
        if not args.startswith("--from="):
            for source in args.split()[:-1]:
                assert (REPO / source).exists(), f"COPY source {source} missing"
                assert source not in ignored, f"COPY source {source} is .dockerignored"
    needed = {"pyproject.toml", "README.md", "deploy/constraints.txt", "deploy/image"}
    needed |= _installed_top_level_folders()
    assert _installed_top_level_folders() >= {"ranking", "stream", "workers", "rankstream"}
    for path in needed:
        assert not any(path == i or path.startswith(i.rstrip("/") + "/") for i in ignored), path


def test_constraints_pin_every_dependency_of_the_image() -> None:
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "lock.py"), "--check"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_online_workers_split_the_online_rankers_between_them() -> None:
    """One writer per model (fencing never fights), and every online ranker has one."""
    from rankstream.ranking.learners import names as learner_names

    owned: list[str] = []
    for service in APP_SERVICES.values():
        command = [str(word) for word in service["command"]]
        if command[:2] == ["worker", "online"]:
            owned += command[command.index("--algo") + 1].split(",")
    assert len(owned) == len(set(owned)), f"a model has two writers: {owned}"
    assert set(owned) <= set(learner_names())
    assert {"opr", "opar1", "opar2", "ogdr", "arow"} <= set(owned)
