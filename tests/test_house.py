"""The house: every module imports on its own in a fresh interpreter, imports (deferred ones too) form no cycle, neither
between modules nor between the parts of a package, rooms import only rooms on their floor or below, and `import engram`
stays light. (Modules are split by cohesion, not by length: there is no line-count rule.)"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "engram"

# floor of each room: a module may import modules on its own floor or below, never above
FLOORS = {
    "errors": 0, "optional": 0, "types": 0, "text": 0, "tokens": 0, "bulk": 0, "config": 1,
    "embed": 2, "llm": 2, "store": 2,
    "ingest": 3, "extract": 3, "graph": 3, "settings": 3,
    "index": 4,
    "retrieve": 5, "qa": 5,
    "memory": 6,
    "eval": 7,
    "cli": 8, "server": 8,
}  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (imports for annotations only)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            todo.append(child)
    return out


def imports(path: Path) -> set[str]:
    """engram modules `path` imports at run time, at module level or inside functions (`from engram.x import y`
    counts y when it is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    known = modules()
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("engram")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engram"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known}
    return {m for m in found if m in known}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "engram"


def import_graph() -> dict[str, set[str]]:
    """Each engram module -> the engram modules it imports at run time (deferred imports too)."""
    return {name: imports(path) - {name} for name, path in modules().items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`, each as the modules around it. A package importing its own parts (an
    `__init__` re-exporting them) is not one; a part importing its package back then is not one either."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, set())):
            if nxt.startswith(node + ".") or node == "engram":  # a package importing its own parts
                continue
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt) :], nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles between the parts of a package inside a room (engram.index.view and engram.index.state, say):
    one part's modules importing another's while some module of that one imports back, though no two modules
    import each other. A room's parts then form layers, as the rooms do (the rooms' order is FLOORS')."""
    packages = {".".join(m.split(".")[:i]) for m in graph for i in range(2, m.count(".") + 1)}
    found: list[list[str]] = []
    for package in sorted(packages):
        depth = package.count(".") + 2

        def part(module: str, package: str = package, depth: int = depth) -> str | None:
            inside = module.startswith(package + ".")
            return ".".join(module.split(".")[:depth]) if inside else None

        parts: dict[str, set[str]] = {}
        for module, targets in graph.items():
            here = part(module)
            if here is not None:
                there = {p for p in map(part, targets) if p is not None and p != here}
                parts.setdefault(here, set()).update(there)
        found += find_cycles(parts)
    return found


def test_imports_form_no_cycle() -> None:
    """Deferred imports inside functions count too: a cycle hidden in a function is still a cycle."""
    assert find_cycles(import_graph()) == []


def test_the_parts_of_a_package_import_one_way() -> None:
    assert package_cycles(import_graph()) == []


def test_the_cycle_checks_find_cycles() -> None:
    """The two checks above on made-up graphs: a cycle between modules of two subpackages, a cycle between two
    subpackages whose modules import each other only one way, and a package re-exporting its parts (no cycle)."""
    view, state = "engram.index.view", "engram.index.state"
    modules_cycle = {f"{view}.a": {f"{state}.b"}, f"{state}.b": {f"{view}.a"}}
    assert find_cycles(modules_cycle) == [[f"{state}.b", f"{view}.a", f"{state}.b"]]
    parts_cycle = {f"{view}.a": {f"{state}.b"}, f"{state}.b": set(), f"{state}.c": {f"{view}.d"}, f"{view}.d": set()}
    assert find_cycles(parts_cycle) == []
    assert package_cycles(parts_cycle) == [[state, view, state]]
    reexport = {state: {f"{state}.b"}, f"{state}.b": {state}, f"{view}.a": {state}}
    assert find_cycles(reexport) == [] and package_cycles(reexport) == []


def test_rooms_never_import_a_higher_floor() -> None:
    wrong = []
    for name, path in modules().items():
        here = room(name)
        if here == "engram":
            continue
        for target in imports(path):
            there = room(target)
            if there != "engram" and FLOORS[there] > FLOORS[here]:
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_every_room_has_a_floor() -> None:
    assert {room(m) for m in modules()} - {"engram"} <= set(FLOORS)


def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    names = sorted(m for m in modules() if not m.endswith("__main__"))
    script = (
        "import importlib, json, sys\n"
        "bad = {}\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as exc:\n"
        "        if 'install' not in str(exc) and 'No module named' not in str(exc):\n"
        "            bad[name] = repr(exc)\n"
        "print(json.dumps(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


def test_import_engram_loads_no_sdk_and_no_numpy() -> None:
    code = "import sys, engram; print(sorted(m for m in ('openai', 'litellm', 'torch', 'numpy', 'scipy', "
    code += "'fastapi', 'mcp', 'spacy') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr

