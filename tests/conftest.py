"""Shared fixtures: one session seed for the whole run, seeded RNGs per test, and the exact
command that reproduces each failure.

Under pytest-xdist every worker imports this file and would draw a seed of its own; the
controller's seed travels to the workers in ``workerinput`` instead, so the seed the header
prints is the one every test used.
"""

import os
import random
import shlex
import sys

import numpy as np
import pytest

from hw.toolchain import ToolchainError, apply_tool_env

try:
    apply_tool_env()
except ToolchainError:
    # A runtime-only machine (a GPU box without the RTL tools) still runs the tests that
    # build no RTL; a test that builds RTL fails there with this same error when it builds.
    pass

_WORKER_KEY = "tessera_seed"

#: Test files that share one Verilator build. Under ``--dist loadgroup`` (``make test``)
#: each group runs on one worker, so the other never sits idle on the build lock while the
#: first compiles it; the build happens once, where it is used.
SHARED_BUILDS = {
    "twin-4x4": ("test_twin", "test_dataflow", "test_attention_device", "test_providers_sim",
                 "test_sequence_sim", "test_sequence_sim_intonly", "test_session_fallback",
                 "test_session_threads", "test_session_intonly", "test_soak",
                 "test_uart_twin"),
}
_GROUP_OF = {module: group for group, modules in SHARED_BUILDS.items() for module in modules}


def work_unit(nodeid):
    """What xdist hands a worker at once: a shared build's group of test files, or else
    the test alone."""
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    return _GROUP_OF.get(module, nodeid)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    # pytest-xdist 3.8's own loadgroup marks tests by rewriting a node attribute that
    # pytest 9 no longer reads, so it schedules them one by one; this does the grouping.
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedBuildScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return work_unit(nodeid)

    return SharedBuildScheduling(config, log)


def _session_seed():
    # TESSERA_SEED reproduces a run; otherwise a fresh seed each session, printed.
    value = os.environ.get("TESSERA_SEED")
    return int(value) if value else random.SystemRandom().randrange(2**31)


SESSION_SEED = _session_seed()


def pytest_configure(config):
    # A worker takes the controller's seed; test modules import SESSION_SEED after this
    # hook (collection comes later), so they see the same value.
    global SESSION_SEED
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and _WORKER_KEY in workerinput:
        SESSION_SEED = int(workerinput[_WORKER_KEY])


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, on the controller: hand the session seed to each worker."""
    node.workerinput[_WORKER_KEY] = SESSION_SEED


def pytest_report_header(config):
    return f"tessera seed: {SESSION_SEED} (rerun with TESSERA_SEED={SESSION_SEED})"


def reproduce_command(nodeid, session_seed=None):
    """The shell command that reruns one test with this session's seeds."""
    seed = SESSION_SEED if session_seed is None else session_seed
    return (f"TESSERA_SEED={seed} {shlex.quote(_python())} -m pytest -p no:cacheprovider "
            f"{shlex.quote(nodeid)}")


def _python():
    # The venv's interpreter as a user in the repository would type it.
    try:
        relative = os.path.relpath(sys.executable)
    except ValueError:
        return sys.executable
    return sys.executable if relative.startswith("..") else relative


def seed_for(nodeid, session_seed=None):
    """The seed the ``seed`` fixture gives the test ``nodeid``."""
    seed = SESSION_SEED if session_seed is None else session_seed
    return (seed + sum(nodeid.encode())) % 2**31


@pytest.fixture(scope="session")
def zoo(tmp_path_factory):
    """Paths (str) of the zoo's QDQ models: the shipped digits CNN and the random models
    (``models.zoo.random_models``), built once per test process."""
    from models.zoo import DIGITS_QDQ, random_models

    out = tmp_path_factory.mktemp("zoo")
    paths = {name: str(random_models.built(name, out)) for name in random_models.MODELS}
    paths["digits"] = str(DIGITS_QDQ)
    return paths


@pytest.fixture
def seed(request):
    """Per-test seed derived from the session seed and the test's name."""
    return seed_for(request.node.nodeid)


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    # Every failure names its seed and the exact command that reruns it, whether or not
    # the test printed anything itself.
    report = yield
    if report.failed:
        lines = [f"session seed {SESSION_SEED}"]
        if "seed" in item.fixturenames:
            lines.append(f"this test's seed {seed_for(item.nodeid)}")
        lines.append(f"reproduce: {reproduce_command(item.nodeid)}")
        report.sections.append(("tessera seed", "\n".join(lines)))
    return report


_failed = []


def pytest_runtest_logreport(report):
    # On the controller this sees the workers' reports too.
    if report.failed and report.nodeid not in _failed:
        _failed.append(report.nodeid)


def pytest_terminal_summary(terminalreporter):
    if _failed:
        terminalreporter.section("reproduce the failures")
        for nodeid in _failed:
            terminalreporter.write_line(reproduce_command(nodeid))
