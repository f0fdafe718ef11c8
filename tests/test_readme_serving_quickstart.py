"""The README's engine quickstarts run as written against a fresh `rankstream serve`.

The blocks are read from README.md (the fenced blocks tagged `python quickstart`, judged
feedback, and `python clicks-quickstart`, clicks), so the README and this test cannot drift
apart; only their URL is pointed at this test's server.
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


def test_the_quickstarts_are_about_fifteen_lines_and_need_no_rankstream() -> None:
    for code in (quickstart(), quickstart("clicks-quickstart")):
        assert len(code.strip().splitlines()) <= 18 and URL in code
        assert "rankstream" not in code


def test_the_readme_quickstart_ranks_and_sends_feedback(
    embedded_settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    env = settings_env(embedded_settings, RANKSTREAM_API_PORT=str(port))
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
            [sys.executable, "-c", quickstart().replace(URL, url)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        deadline = time.monotonic() + 60
        while True:  # all 100 judged queries reached the evaluator (in the server's process)
            with urllib.request.urlopen(url + "/v1/models") as reply:
                listing = json.load(reply)
            if listing["queries_evaluated"] >= 100 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert listing["queries_evaluated"] == 100
    assert done.stdout.strip() in {m["name"] for m in listing["models"]}
    assert "uni_con" in {m["name"] for m in listing["models"]}


def test_the_readme_clicks_quickstart_posts_clicks_the_join_learns_from(
    embedded_settings: Settings, tmp_path: Path
) -> None:
    """The clicks block against a fresh embedded serve: every post taken, every session
    closed by the block's empty list, so the in-process click join teaches PDGD, which it
    publishes as the model `pdgd` (no click window to wait for)."""
    port = free_port()
    env = settings_env(embedded_settings, RANKSTREAM_API_PORT=str(port))
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
            [sys.executable, "-c", quickstart("clicks-quickstart").replace(URL, url)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        deadline = time.monotonic() + 60
        while True:  # the join closed the sessions and published what PDGD learned
            with urllib.request.urlopen(url + "/v1/models") as reply:
                names = {m["name"] for m in json.load(reply)["models"]}
            if "pdgd" in names or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert "pdgd" in names, sorted(names)
    assert done.stdout.strip() in names
