"""The tree is the architecture: imports point down only, no import circle, the library's top level holds only its
shared modules, and the public API resolves without loading TensorFlow. Read from the code's own imports (lazy
ones inside functions included), so a new arrow that points up fails here, naming the file."""

import ast
import functools
import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# bench/ -> run/ -> tfrecords/ -> xlnet_tf/ (each may import those after it)
PACKAGES = ["bench", "run", "tfrecords", "xlnet_tf"]
# Inside xlnet_tf/, lowest first: a part may import its own modules and the parts on lower rows.
LAYERS = [
    {"errors"},
    {"files"},
    {"config", "cli"},
    {"text", "layers"},
    {"backbone", "heads"},
    {"checkpoints"},
    {"artifacts"},
    {"training", "metrics"},
    {"models"},
    {"inference"},
    {"serving"},
]
SHARED_TOP_LEVEL = {"__init__", "errors", "files", "config", "cli", "backbone", "heads", "checkpoints"}


def _modules(package):
    for path in sorted(glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, REPO)
        name = rel[:-3].replace(os.sep, ".")
        yield rel, name[:-len(".__init__")] if name.endswith(".__init__") else name


def _imports(path):
    """Every absolute import of a project package in the file, at any depth (lazy imports included)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] in PACKAGES:
                yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    yield a.name, []


def _part(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _rank(part):
    for i, row in enumerate(LAYERS):
        if part in row:
            return i
    raise AssertionError(f"xlnet_tf.{part} is in no row of LAYERS: place it (tests/test_architecture.py)")


def _resolve(module, names, known):
    """The project modules an import statement reaches: `from a.b import c` is a.b.c when that is a module."""
    submodules = [f"{module}.{n}" for n in names if f"{module}.{n}" in known]
    others = [n for n in names if f"{module}.{n}" not in known]
    return submodules + ([module] if others or not names else [])


@functools.lru_cache(maxsize=1)
def _graph():
    known = {name for package in PACKAGES for _, name in _modules(package)}
    edges = {}
    for package in PACKAGES:
        for rel, name in _modules(package):
            targets = set()
            for module, names in _imports(os.path.join(REPO, rel)):
                targets.update(t for t in _resolve(module, names, known) if t != name)
            edges[name] = (rel, targets)
    return edges


def test_packages_import_only_the_packages_below_them():
    wrong = []
    for name, (rel, targets) in _graph().items():
        own = PACKAGES.index(name.split(".")[0])
        wrong += [f"{rel} imports {t}" for t in sorted(targets) if PACKAGES.index(t.split(".")[0]) < own]
    assert not wrong, "upward imports between packages: " + "; ".join(wrong)


def test_library_parts_import_only_their_own_and_lower_parts():
    wrong = []
    for name, (rel, targets) in _graph().items():
        if not name.startswith("xlnet_tf"):
            continue
        part = _part(name)
        for t in sorted(targets):
            if t.startswith("xlnet_tf") and _part(t) not in ("__init__", part) and part != "__init__":
                if _rank(_part(t)) >= _rank(part):
                    wrong.append(f"{rel} ({part}) imports {t} ({_part(t)})")
    assert not wrong, "imports that point up or sideways inside xlnet_tf/: " + "; ".join(wrong)


def test_no_import_circle():
    edges = {name: targets for name, (_, targets) in _graph().items()}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_library_top_level_holds_only_shared_modules():
    top = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "xlnet_tf", "*.py"))}
    assert top - SHARED_TOP_LEVEL == set(), "modules outside a concept folder of xlnet_tf/"


def test_every_library_part_has_a_row():
    parts = {_part(name) for _, name in _modules("xlnet_tf")} - {"__init__"}
    for part in parts:
        _rank(part)


def test_the_public_api_resolves_without_loading_tensorflow_until_used():
    code = ("import sys, xlnet_tf\n"
            "assert 'tensorflow' not in sys.modules, 'import xlnet_tf loaded TensorFlow'\n"
            "missing = [n for n in xlnet_tf.__all__ if getattr(xlnet_tf, n, None) is None]\n"
            "assert not missing, missing\n"
            "print(len(xlnet_tf.__all__))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.strip().splitlines()[-1]) >= 14


def test_an_unknown_public_name_is_an_attribute_error():
    import xlnet_tf

    with pytest.raises(AttributeError, match="no attribute 'XLNetNothing'"):
        xlnet_tf.XLNetNothing  # noqa: B018
