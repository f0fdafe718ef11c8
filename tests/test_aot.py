"""The ahead-of-time linear kernel: bit-identical to the JIT, used only where it fits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rankstream.ranking import aot, kernels
from rankstream.ranking.rules import BAD_LABEL, NONFINITE, OGDR_RULE, OK, OPAR1_RULE, OPAR2_RULE

pytestmark = pytest.mark.skipif(
    not any((Path(d) / "cc").exists() for d in os.environ.get("PATH", "").split(os.pathsep)),
    reason="pycc needs a C compiler",
)


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build for the module, in a private numba cache directory."""
    directory = tmp_path_factory.mktemp("numba-cache")
    saved = os.environ.get("NUMBA_CACHE_DIR")
    os.environ["NUMBA_CACHE_DIR"] = str(directory)
    try:
        aot.build()
    finally:
        if saved is None:
            del os.environ["NUMBA_CACHE_DIR"]
        else:
            os.environ["NUMBA_CACHE_DIR"] = saved
    return directory


@pytest.fixture
def built(build_dir: Path, monkeypatch: pytest.MonkeyPatch):
    """The build loaded, in auto mode; the module's state restored afterwards."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(build_dir))
    monkeypatch.setattr(aot, "_state", {"mode": "auto", "module": None, "loaded": False})
    module = aot.load()
    assert module is not None
    return module


def _arguments(
    phi_dtype: str, scaled: bool, seed: int, n: int = 3000, d: int = 13, weighted: bool = False
):
    """A batch for three models (OPAR-I, OPAR-II, OGDR), one scaler group when scaled,
    importance weights when weighted (then the last two shrink towards an anchor, as on
    click triplets)."""
    rng = np.random.default_rng(seed)
    phi = rng.standard_normal((40, d)).astype(phi_dtype)
    p1 = rng.integers(0, 40, n).astype(np.int32)
    p2 = (p1 + 1 + rng.integers(0, 39, n).astype(np.int32)) % 40
    y = rng.choice([-1.0, 1.0], n)
    weights = rng.uniform(0.0, 3.0, n)
    for array in (phi, p1, p2, y, weights):
        array.flags.writeable = False
    return (
        np.array([OPAR1_RULE, OPAR2_RULE, OGDR_RULE], dtype=np.int64),
        np.array([0.5, 0.5, 0.01]),
        rng.standard_normal((3, d)) * 0.1,
        rng.uniform(0.5, 2.0, (1, d)) if scaled else None,
        np.zeros(3, dtype=np.int64),
        phi,
        p1,
        p2,
        y,
        weights if weighted else None,
        np.array([0.0, 1e-3, 1e-2]) if weighted else np.zeros(3),
        rng.standard_normal((3, d)) * 0.05,
        np.zeros(3, dtype=np.int64),
        np.zeros(3, dtype=np.int64),
        np.full(3, -1, dtype=np.int64),
    )


def _run(kernel, arguments):
    """Call `kernel` on fresh copies of the outputs; return (W, n_updates, status, bad_row)."""
    args = list(arguments)
    for i in (2, 12, 13, 14):
        args[i] = args[i].copy()
    kernel(*args)
    return args[2], args[12], args[13], args[14]


@pytest.mark.parametrize("variant", aot.VARIANTS, ids=lambda v: v.symbol)
def test_build_gives_the_jits_weights_bit_for_bit(built, variant: aot.Variant) -> None:
    arguments = _arguments(
        variant.phi_dtype, variant.scaled, seed=hash(variant) % 1000, weighted=variant.weighted
    )
    assert aot.linear_kernel(*arguments) is getattr(built, variant.symbol)
    ahead = _run(getattr(built, variant.symbol), arguments)
    jit = _run(kernels.learn_linear, arguments)
    assert ahead[0].tobytes() == jit[0].tobytes()
    for a, b in zip(ahead[1:], jit[1:], strict=True):
        np.testing.assert_array_equal(a, b)
    assert (ahead[2] == OK).all() and (ahead[1] > 0).all()


def test_build_reports_bad_rows_as_the_jit_does(built) -> None:
    clean = _arguments("float32", True, seed=3)
    arguments = list(clean)
    phi = arguments[5].copy()
    phi[int(arguments[6][700])] = np.nan  # the image of row 700's p1: first used there
    phi.flags.writeable = False
    arguments[5] = phi
    ahead = _run(built.learn_linear_float32_scaled, arguments)
    jit = _run(kernels.learn_linear, arguments)
    for a, b in zip(ahead, jit, strict=True):
        assert a.tobytes() == b.tobytes()
    rows = ~np.isfinite(phi[arguments[6]]).all(1) | ~np.isfinite(phi[arguments[7]]).all(1)
    first_nan = int(np.flatnonzero(rows)[0])
    assert (ahead[2] == NONFINITE).all() and (ahead[3] == first_nan).all()

    arguments = list(clean)
    y = arguments[8].copy()
    y[5] = 0.0
    y.flags.writeable = False
    arguments[8] = y
    ahead = _run(built.learn_linear_float32_scaled, arguments)
    assert (ahead[2] == BAD_LABEL).all() and (ahead[3] == 5).all()


def test_anything_but_an_exported_layout_goes_to_the_jit(built) -> None:
    arguments = list(_arguments("float32", False, seed=4))
    assert aot.linear_kernel(*arguments) is built.learn_linear_float32_unscaled
    for index, other in (
        (6, arguments[6].astype(np.int64)),  # p1 of another dtype
        (5, np.asfortranarray(arguments[5])),  # phi not in C order
        (6, None),  # ready differences (p1 None): not exported
        (5, arguments[5].astype(np.float16)),
    ):
        changed = list(arguments)
        changed[index] = other
        assert aot.linear_kernel(*changed) is kernels.learn_linear
    aot.set_mode("jit")
    assert aot.linear_kernel(*arguments) is kernels.learn_linear


def test_required_build_that_is_missing_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(aot, "_state", {"mode": "auto", "module": None, "loaded": False})
    with pytest.raises(aot.AotUnavailableError, match=r"python -m rankstream\.ranking\.aot"):
        aot.set_mode("aot")
    with pytest.raises(ValueError, match="kernel mode"):
        aot.set_mode("fast")
    assert aot.linear_kernel(*_arguments("float32", True, seed=5)) is kernels.learn_linear


def test_a_replay_on_the_build_never_imports_numba(build_dir: Path, tmp_path: Path) -> None:
    from rankstream.harness.replay_bench import write_log
    from rankstream.ranking.learners import worker_defaults

    write_log(tmp_path / "log", 20_000, 2, seed=1)
    script = (
        "import json, sys\n"
        "from rankstream.ranking import aot\n"
        "from rankstream.workers.direct_replay import DirectOptions, train_from_log\n"
        "aot.set_mode(sys.argv[1])\n"
        f"options = DirectOptions(algos={worker_defaults()!r})\n"
        f"result = train_from_log({str(tmp_path / 'log')!r}, options)\n"
        "digests = {k: v['weights_sha256'] for k, v in result.summaries().items()}\n"
        "print(json.dumps({'numba': 'numba' in sys.modules, 'weights': digests}))\n"
    )
    outputs = {}
    for mode in ("aot", "jit"):  # the JIT on its usual cache: already compiled there
        env = {**os.environ, "NUMBA_CACHE_DIR": str(build_dir)} if mode == "aot" else None
        done = subprocess.run(
            [sys.executable, "-c", script, mode], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        outputs[mode] = json.loads(done.stdout)
    assert outputs["aot"]["numba"] is False and outputs["jit"]["numba"] is True
    assert outputs["aot"]["weights"] == outputs["jit"]["weights"]


def test_the_exported_arguments_are_the_kernels_own() -> None:
    import inspect

    names = list(inspect.signature(kernels.learn_linear.py_func).parameters)
    assert [argument[0] for argument in aot._ARGUMENTS] == names


def test_replay_refuses_a_required_build_that_is_missing(tmp_path: Path) -> None:
    from rankstream.harness.replay_bench import write_log

    write_log(tmp_path / "log", 2_000, 1, seed=2)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "empty")}
    command = [sys.executable, "-m", "rankstream", "replay", str(tmp_path / "log"), "--direct"]
    done = subprocess.run([*command, "--kernels", "aot"], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert "no ahead-of-time kernel build" in done.stderr
    done = subprocess.run(
        [*command, "--kernels", "auto", "--json"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert {m["triplets_seen"] for m in json.loads(done.stdout).values()} == {2_000}


def test_numba_is_pinned_to_the_range_the_build_is_tested_on() -> None:
    """pyproject.toml's numba pin is aot.TESTED_NUMBA, and the installed numba is in it."""
    import tomllib
    from importlib.metadata import version

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    (pin,) = [d for d in project["project"]["dependencies"] if d.startswith("numba")]
    first, last = (".".join(map(str, v)) for v in aot.TESTED_NUMBA)
    assert pin == f"numba>={first},<{last}"
    aot.check_numba_version(version("numba"))


def test_an_untested_numba_is_refused_before_pycc_is_touched(monkeypatch) -> None:
    """Outside the tested range the build stops with a clear error (and `main` falls
    back to the JIT), before anything patches numba.pycc."""
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.99.0")
    with pytest.raises(aot.UntestedNumbaError, match=r"numba 0\.99\.0 is outside .*JIT"):
        aot.build()
    for version in ("0.67.9", "1.0.0", "dev"):
        with pytest.raises(aot.UntestedNumbaError):
            aot.check_numba_version(version)
