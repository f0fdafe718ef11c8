"""The documentation site builds with --strict and renders: checked in headless Chromium.

`mkdocs build --strict` (what `make docs` runs) fails on a broken link, a missing page or
a page left out of the nav. The built front page and the HTTP API reference are then
rendered by Debian's `chromium` (installed here when missing, as root, as the compose test
does): their DOM must hold the expected title, the routes (from the OpenAPI document, the
generated table) and the sections; their screenshots go to report/docs-site/ and must not
be blank.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rankstream.serve.openapi import openapi_document
from rankstream.stream.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "report" / "docs-site"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--virtual-time-budget=5000", "--window-size=1280,1000", "--allow-file-access-from-files",
]  # fmt: skip


def chromium() -> str:
    """Debian's chromium, installed first if missing (root; otherwise the test says so)."""
    found = shutil.which("chromium")
    if found is None:
        assert os.geteuid() == 0, "chromium is missing: apt-get install chromium (as root)"
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env, check=True,
                       capture_output=True, timeout=900)  # fmt: skip
        found = shutil.which("chromium")
    assert found, "chromium did not install"
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def render(page: Path, name: str, profile: Path) -> str:
    """The page's DOM after its scripts ran; its screenshot saved as report/docs-site/NAME.png."""
    browser = chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / f"{name}.png"
    screenshot.unlink(missing_ok=True)
    for output in ("--dump-dom", f"--screenshot={screenshot}"):
        done = subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile / output[2:6]}", output,
             page.as_uri()],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        if output == "--dump-dom":
            dom = done.stdout
    assert_not_blank(screenshot)
    (ARTIFACTS / f"{name}.html").write_text(dom, encoding="utf-8")
    return dom


def assert_not_blank(png: Path) -> None:
    """A rendered page: many distinct colours and dark text on a light page, not one fill."""
    import matplotlib.image

    pixels = matplotlib.image.imread(png)[..., :3]
    assert pixels.shape[0] >= 900 and pixels.shape[1] >= 1200, pixels.shape
    grey = pixels.mean(axis=2)
    assert grey.std() > 0.05, f"{png} is nearly one colour"
    assert (grey < 0.3).mean() > 0.005, f"{png} holds almost no dark (text) pixels"
    assert len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50


def visible_text(dom: str) -> str:
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text))


def test_the_front_page_renders_with_its_title_and_the_way_in(site: Path, tmp_path: Path):
    dom = render(site / "index.html", "front-page", tmp_path)
    assert re.search(r"<title>\s*rankstream\s*</title>", dom), "the site's title"
    text = visible_text(dom)
    for words in ("learns image rankings", "make demo", "Connect your engine",
                  "Online Learning to Rank for Content-Based Image Retrieval"):  # fmt: skip
        assert words in text, words
    assert 'href="guide/connect.html"' in dom  # the way in links the guide


def test_the_http_reference_renders_every_route(site: Path, tmp_path: Path):
    dom = render(site / "reference" / "http-api.html", "http-api", tmp_path)
    assert re.search(r"<title>\s*HTTP API - rankstream\s*</title>", dom)
    text = visible_text(dom)
    document = openapi_document(Settings().phi_dim)
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert f"{method.upper()} {path}" in text, f"no section for {method} {path}"
            assert operation["summary"].split(";")[0] in text, operation["summary"]
    assert "invalid_field" in text and "Idempotency-Key" in text
