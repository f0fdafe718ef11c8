"""The OpenAPI document is the contract, checked by a tester that is not part of rankstream:
schemathesis (its CLI) generates requests from `GET /openapi.json` and sends them to a real
`rankstream serve` (the embedded default, a child process on a loopback port), without a
token, and with one (every protected route once without it: 401; then the full run with
it). Checks: every check schemathesis has (`--checks all`): no 5xx; every status, content
type, header and body is one the document describes; no request the document says is
valid is refused (only 2xx or 401/403/404/409/429 may answer one, which the document
describes too), none it says is invalid accepted; a missing or ignored token, methods,
links. The one rule JSON Schema cannot state (one phi row, engine score and grade per
candidate) is an `x-` key of the document that `openapi_rules` applies to the generated
valid bodies; everything else (stored model names among them: 404) the tester meets as an
outside one would.

`make test`: a fixed seed, derandomized generation, a few examples per operation (the
coverage phase skips /v1/rank, whose boundary bodies cost ~40 s to generate).
`make fuzz-api`: RANKSTREAM_OPENAPI_EXAMPLES examples per operation, every phase, a
random seed (printed on failure, with schemathesis' report of each failure).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rankstream.harness.serve_process import ServeProcess
from rankstream.stream.settings import Settings

pytest.importorskip("schemathesis")
pytestmark = pytest.mark.timeout(2400)  # make fuzz-api's long runs; make test's take ~25 s each

CHECKS = "all"  # every check schemathesis has, none left out
TOKEN = "contract-t0ken"
EXAMPLES = int(os.environ.get("RANKSTREAM_OPENAPI_EXAMPLES", "0"))  # 0: the bounded run
TESTS = Path(__file__).parent
# the bounded run: no coverage phase for /v1/rank (its boundary bodies are slow to build)
_BOUNDED_CONFIG = """
[[operations]]
include-name = "POST /v1/rank"
phases.coverage.enabled = false
"""


def _serve(directory: Path, **env: str) -> Iterator[ServeProcess]:
    """A serve whose deadline (503 past it, described) no request misses on a busy machine:
    the contract, not the machine's speed, is under test."""
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:12]}", data_dir=str(directory))
    env = {"RANKSTREAM_API_DEADLINE_SECONDS": "60", **env}
    process = ServeProcess(settings, directory / "serve.log", **env)
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def open_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    yield from _serve(tmp_path_factory.mktemp("open"))


@pytest.fixture(scope="module")
def guarded_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    yield from _serve(tmp_path_factory.mktemp("guarded"), RANKSTREAM_API_TOKEN=TOKEN)


def schemathesis_run(
    serve: ServeProcess,
    tmp_path: Path,
    examples: int,
    *args: str,
    token: str | None = None,
    send_token: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`schemathesis run` against `serve` with the contract's checks; `token`: serve's,
    sent as the bearer token if `send_token`."""
    executable = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert executable is not None, "schemathesis is in the dev extra: pip install -e '.[dev]'"
    config = tmp_path / "schemathesis.toml"
    config.write_text("" if EXAMPLES else _BOUNDED_CONFIG)
    if EXAMPLES:
        seed = ["--seed", os.environ.get("RANKSTREAM_OPENAPI_SEED", str(uuid.uuid4().int % 2**31))]
        seed += ["--generation-database", "none"]
    else:
        seed = ["--seed", "41", "--generation-deterministic"]  # implies no example database
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "openapi_rules",
        "PYTHONPATH": os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    command = [
        executable, "--config-file", str(config), "run", f"{serve.url}/openapi.json",
        "--checks", CHECKS, "--max-examples", str(EXAMPLES or examples), *seed,
        "--workers", "1", "--no-color",
        "--request-timeout", "30", "--report", "json", "--report-dir", str(tmp_path / "report"),
        *(["--header", f"Authorization: Bearer {token}"] if token and send_token else []),
        *args,
    ]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=2000)


def _passed(run: subprocess.CompletedProcess[str]) -> None:
    lines = [line[:400] for line in (run.stdout + run.stderr).splitlines()]  # bodies are long
    assert run.returncode == 0, "\n".join(lines[-300:])
    assert "generated" in run.stdout and " passed" in run.stdout, run.stdout


def test_without_a_token_every_answer_is_described_and_no_valid_request_refused(
    open_serve: ServeProcess, tmp_path: Path
) -> None:
    _passed(schemathesis_run(open_serve, tmp_path, 10))


def test_under_a_token_a_request_without_it_gets_a_described_401(
    guarded_serve: ServeProcess, tmp_path: Path
) -> None:
    run = schemathesis_run(
        guarded_serve, tmp_path, 3, "--phases", "examples,fuzzing", token=TOKEN, send_token=False
    )
    _passed(run)
    assert "returned only 401/403 responses" in run.stdout, run.stdout  # it was refused


def test_under_a_token_with_it_every_answer_is_described(
    guarded_serve: ServeProcess, tmp_path: Path
) -> None:
    _passed(schemathesis_run(guarded_serve, tmp_path, 6, token=TOKEN))
