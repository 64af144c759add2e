"""Optional extras are found safely from any thread: a module that another thread is importing sits in
sys.modules without its `__spec__` for a moment, and `importlib.util.find_spec` raises ValueError for it (issue
52, item 4: `graph/parallel.py` under concurrent REST queries). Each check runs in a fresh interpreter, with the
module put in sys.modules as such an import leaves it, so no earlier test has cached the answer."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

HALF_IMPORTED = """
import sys, types
half = types.ModuleType({name!r})  # as an extension module is between its init and its spec being set
half.__spec__ = None
sys.modules[{name!r}] = half
"""

CHECKS = {
    "dot kernel": ("simsimd", "from engram.graph import parallel; assert parallel.dot_kernel() is half"),
    "8-bit codes": ("simsimd", "from engram.index.state import coded_rows as coded; assert coded.available()"),
    "ann extra": ("faiss", "from engram.graph import ann; assert ann.available()"),
}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_a_module_being_imported_by_another_thread_counts_as_installed(check: str) -> None:
    name, code = CHECKS[check]
    script = HALF_IMPORTED.format(name=name) + textwrap.dedent(code)
    env = {**os.environ, "ENGRAM_DOT_KERNEL": "simsimd"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_answer_is_kept_and_threads_agree() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from engram import optional

    with ThreadPoolExecutor(16) as pool:
        answers = set(pool.map(lambda _: optional.installed("json"), range(64)))
    assert answers == {True} and optional.installed("engram_no_such_module") is False
    assert optional.module("engram_no_such_module") is None and optional.module("json") is sys.modules["json"]


MISSING = """
import sys
sys.modules[{name!r}] = None  # what an uninstalled module looks like to `import`
from engram.errors import MissingDependencyError
try:
    {call}
except MissingDependencyError as error:
    assert "engram[ann]" in str(error), error
else:
    raise SystemExit("no MissingDependencyError")
"""
NEEDS = {
    "faiss": ("faiss", "from engram.graph import ann; ann.library()"),
    "8-bit codes on": (
        "simsimd",
        "from engram.index.state import coded_rows as coded; from engram.config import GraphConfig; "
        "coded.use_codes(GraphConfig(fact_codes='on'), 10)",
    ),
}


@pytest.mark.parametrize("need", sorted(NEEDS))
def test_a_missing_extra_raises_missing_dependency_error_naming_it(need: str) -> None:
    name, call = NEEDS[need]
    script = MISSING.format(name=name, call=call)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-500:]
