"""The README's engine quickstarts run as written against a fresh `rankstream serve`.

The blocks are read from README.md (the fenced blocks tagged `python quickstart`, judged
feedback over raw HTTP, and `python clicks-quickstart`, clicks through the Python client),
so the README and this test cannot drift apart; only their URL is pointed at this test's
server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from rankstream.harness.serve_process import free_port, settings_env
from rankstream.stream.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"
URL = "http://127.0.0.1:8000"


def quickstart(tag: str = "quickstart") -> str:
    blocks = re.findall(rf"```python {tag}\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1, f"README.md must hold exactly one `python {tag}` block"
    return blocks[0]


def test_the_quickstarts_are_short_and_the_raw_http_one_needs_no_rankstream() -> None:
    judged, clicks = quickstart(), quickstart("clicks-quickstart")
    for code in (judged, clicks):
        assert len(code.strip().splitlines()) <= 18 and URL in code
    assert "rankstream" not in judged, "the raw-HTTP example stands for other languages"
    assert "from rankstream.client import" in clicks and "engine_scores" in clicks


def run_block(tag: str, settings: Settings, tmp_path: Path, settled) -> tuple[str, dict]:
    """The README block `tag` against a fresh embedded serve on a free port; then polls
    /v1/models (at most 60 s) until `settled(listing)`. Returns what the block printed and
    the last listing."""
    port = free_port()
    env = settings_env(settings, RANKSTREAM_API_PORT=str(port))
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "rankstream", "serve"], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "rankstream serve did not start"
                time.sleep(0.1)
        done = subprocess.run(
            [sys.executable, "-c", quickstart(tag).replace(URL, url)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        deadline = time.monotonic() + 60
        while True:
            with urllib.request.urlopen(url + "/v1/models") as reply:
                listing = json.load(reply)
            if settled(listing) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return done.stdout.strip(), listing


def test_the_readme_quickstart_ranks_and_sends_feedback(
    embedded_settings: Settings, tmp_path: Path
) -> None:
    """All 100 judged queries reach the evaluator (in the server's process)."""
    printed, listing = run_block(
        "quickstart", embedded_settings, tmp_path, lambda m: m["queries_evaluated"] >= 100
    )
    assert listing["queries_evaluated"] == 100
    assert printed in {m["name"] for m in listing["models"]}
    assert "uni_con" in {m["name"] for m in listing["models"]}


def test_the_readme_clicks_quickstart_posts_clicks_the_join_learns_from(
    embedded_settings: Settings, tmp_path: Path
) -> None:
    """The clicks block (the Python client, the engine's own scores) against a fresh
    embedded serve: every post taken, every session closed by `session_over`, so the
    in-process click join teaches PDGD, which it publishes as the model `pdgd` (no click
    window to wait for); the engine's ranking is listed as the model `engine`, the
    incumbent."""

    def names(listing: dict) -> set[str]:
        return {m["name"] for m in listing["models"]}

    printed, listing = run_block(
        "clicks-quickstart", embedded_settings, tmp_path, lambda m: "pdgd" in names(m)
    )
    assert {"pdgd", "engine"} <= names(listing), sorted(names(listing))
    assert printed in names(listing)
