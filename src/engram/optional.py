"""Optional dependencies (extras such as simsimd and faiss): whether one is installed, and the module, found once
per process and safe to ask from any thread.

`importlib.util.find_spec` is not: while another thread imports an extension module, the module sits in
`sys.modules` before its `__spec__` is set, and `find_spec` raises ValueError for it (seen under concurrent
REST queries). Here a module already in `sys.modules` counts as installed, the check runs once under a lock, and
its answer is kept.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType

_lock = threading.Lock()
_found: dict[str, bool] = {}
_modules: dict[str, ModuleType | None] = {}


def installed(name: str) -> bool:
    """Whether the top-level module `name` can be imported (found, not imported)."""
    with _lock:
        if name not in _found:
            _found[name] = _find(name)
        return _found[name]


def module(name: str) -> ModuleType | None:
    """The module `name`, imported once (None when it is not installed or fails to import)."""
    with _lock:
        if name not in _modules:
            try:
                _modules[name] = importlib.import_module(name)
            except ImportError:
                _modules[name] = None
        return _modules[name]


def _find(name: str) -> bool:
    if sys.modules.get(name) is not None:  # imported, or being imported by another thread
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:  # another thread's import put it in sys.modules meanwhile, without its spec yet
        return sys.modules.get(name) is not None
    except ImportError:  # a module blocked in sys.modules (None)
        return False
