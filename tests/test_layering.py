"""Imports run one way (docs/architecture.md, "Layering"):

    models → contract → hw → twin → sw_driver → tessera → bench → (sim, tests)

A module may import its own package and the layers to its left, never one to its right;
no two modules import each other, directly or around a loop (imports inside functions
count: they are how such loops hide). The driver also never imports ``hw`` or Amaranth,
and the contract and the golden models never import Amaranth. The tests and the cocotb
testbenches with their helpers (``sim/``) are the top: they may use anything, and nothing
imports them. No module is exempt.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Packages from the bottom layer up. The benchmarks measure the product (``tessera``) and
#: import it; only the tests import them (``tessera bench`` starts ``python -m bench``).
#: The driver runs a twin without naming it: the "sim" and "uart-twin" providers find theirs
#: through entry points (``sw_driver/providers/simulated.py``).
LAYERS = ("models", "contract", "hw", "twin", "sw_driver", "tessera", "bench")
#: The top, above every layer: tests and the cocotb testbenches may import anything (and
#: each other), and no layer may import them.
TOP = ("sim", "tests")
ORDER = " → ".join(LAYERS) + " → (" + ", ".join(TOP) + ")"
#: Imports a package may not make although the layers allow them: the driver learns the
#: hardware from the device's registers and the contract, never from its generators.
FORBIDDEN = {
    "models": ("amaranth",),
    "contract": ("amaranth",),
    "sw_driver": ("hw", "amaranth"),
}


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules():
    """``{module name: path}`` of every module in the layered packages and the top."""
    modules = {}
    for package in LAYERS + TOP:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[module_name(path)] = path
    return modules


def imported_names(path, module):
    """``(dotted name, line)`` of every import in ``path``, relative ones made absolute;
    ``from x import y`` yields ``x.y`` (a submodule, when it is one) and ``x``."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            yield source, node.lineno
            for alias in node.names:
                yield f"{source}.{alias.name}", node.lineno


def import_graph(modules):
    """``{module: {imported project module: first line}}``."""
    graph = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for name, line in imported_names(path, module):
            target = name
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # `from pkg import name` also names pkg itself; a module's own package
            # (__init__) is not an edge: Python imports it first, whatever it holds.
            if target and target != module and not module.startswith(target + "."):
                edges.setdefault(target, line)
    return graph


def layering_violations(modules):
    problems = []
    for module, path in modules.items():
        layer = module.split(".")[0]
        if layer in TOP:
            continue
        relative = path.relative_to(ROOT)
        reported = set()
        for name, line in imported_names(path, module):
            top = name.split(".")[0]
            if (line, top) in reported:  # `from x import y` names x, then x.y
                continue
            reported.add((line, top))
            if top in FORBIDDEN.get(layer, ()):
                problems.append((relative, line, f"{module} imports {name}: "
                                 f"{layer} may not import {top}"))
            elif top in TOP or (top in LAYERS and LAYERS.index(top) > LAYERS.index(layer)):
                problems.append((relative, line, f"{module} imports {name}: upward import, "
                                 f"{layer} is below {top} ({ORDER})"))
    return [f"{relative}:{line}: {rule}" for relative, line, rule in sorted(problems)]


def import_cycles(graph):
    """Strongly connected components of more than one module (Tarjan), each as a loop."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def describe_cycle(component, graph, modules):
    members = set(component)
    lines = [f"{modules[source].relative_to(ROOT)}:{line}: {source} imports {target}"
             for source in component for target, line in sorted(graph[source].items())
             if target in members]
    return "import cycle between " + ", ".join(component) + ":\n  " + "\n  ".join(lines)


def test_imports_run_downward():
    problems = layering_violations(project_modules())
    assert not problems, "\n".join(problems)


def test_no_import_cycles():
    modules = project_modules()
    graph = import_graph(modules)
    cycles = import_cycles(graph)
    assert not cycles, "\n".join(describe_cycle(c, graph, modules) for c in cycles)


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path, monkeypatch):
    """The checks themselves, on a made-up tree: a violation is named by file, line and
    rule."""
    for relative, text in {
        "models/__init__.py": "",
        "hw/__init__.py": "",
        "hw/a.py": "from . import b\n",
        "hw/b.py": "def later():\n    from hw.a import x\n",
        "sw_driver/__init__.py": "",
        "sw_driver/run.py": "import numpy\nfrom hw import a\n",
        "contract/__init__.py": "",
        "contract/regs.py": "\n\nfrom twin.dma import Twin\n",
        "twin/__init__.py": "",
        "twin/dma.py": "def helper():\n    from sim.cocotb_util import send_stream\n",
        "sim/__init__.py": "",
        "sim/tb_x.py": "import tessera.cli\nfrom bench import run\n",
        "tests/test_x.py": "from sim import tb_x\n",
    }.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    modules = project_modules()
    order = "models → contract → hw → twin → sw_driver → tessera → bench → (sim, tests)"
    assert layering_violations(modules) == [
        f"contract/regs.py:3: contract.regs imports twin.dma: upward import, contract is "
        f"below twin ({order})",
        "sw_driver/run.py:2: sw_driver.run imports hw: sw_driver may not import hw",
        f"twin/dma.py:2: twin.dma imports sim.cocotb_util: upward import, twin is below sim "
        f"({order})",
    ]
    graph = import_graph(modules)
    assert import_cycles(graph) == [["hw.a", "hw.b"]]
    assert describe_cycle(["hw.a", "hw.b"], graph, modules) == (
        "import cycle between hw.a, hw.b:\n  hw/a.py:1: hw.a imports hw.b\n"
        "  hw/b.py:2: hw.b imports hw.a")
