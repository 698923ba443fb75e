"""BUILD names every Python module of the repository, and every file it names exists."""

import glob
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("xlnet_tf", "tfrecords", "run", "bench", "tests")


def _evaluate_build():
    """Evaluates BUILD with stand-ins for the Bazel functions; returns {target name: kwargs}."""
    targets = {}

    def rule(kind):
        def define(**kwargs):
            assert kwargs["name"] not in targets, f"duplicate target {kwargs['name']}"
            targets[kwargs["name"]] = dict(kwargs, kind=kind)
        return define

    def bazel_glob(patterns):
        out = []
        for pattern in patterns:
            out += [os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, pattern), recursive=True)
                    if os.path.isfile(p)]
        return out

    scope = {"load": lambda *a, **k: None, "package": lambda **k: None, "requirement": lambda n: "pip:" + n,
             "glob": bazel_glob, "py_library": rule("py_library"), "py_binary": rule("py_binary"),
             "py_test": rule("py_test")}
    with open(os.path.join(REPO, "BUILD"), encoding="utf-8") as f:
        exec(compile(f.read(), "BUILD", "exec"), scope)  # noqa: S102 - our own BUILD file
    return targets


def test_build_covers_every_module_and_names_existing_files():
    targets = _evaluate_build()
    named = set()
    for target in targets.values():
        for src in target.get("srcs", []) + [target.get("main")] * ("main" in target):
            assert os.path.isfile(os.path.join(REPO, src)), f"{target['name']}: {src} does not exist"
            named.add(src)
        for dep in target.get("deps", []):
            if dep.startswith(":"):
                assert dep[1:] in targets, f"{target['name']}: unknown dependency {dep}"
    modules = {os.path.relpath(p, REPO) for package in PACKAGES
               for p in glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True)}
    missing = sorted(modules - named)
    assert not missing, f"modules without a BUILD target: {missing}"


def test_every_test_file_is_a_py_test():
    targets = _evaluate_build()
    tests = {t["srcs"][0] for t in targets.values() if t["kind"] == "py_test"}
    files = {os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "tests", "**", "test_*.py"), recursive=True)}
    assert files == tests, sorted(files ^ tests)
