"""A test that `make test` skips for a separate target runs in that target.

Tests gate their long or hostile cases on an environment variable (ROCKETLAKE_FAULTS=all for
`make faults`, CRASH_POINTS for `make crash`, ...). The targets name their test files one by one,
so a file that reads such a variable but is missing from every target setting it is run by no
target but `make long`, while its skip reason tells the reader another target runs it. Read from
the Makefile's text: the recipe lines of each target, with their continuation lines joined."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# each gate, and the names that read it in a test file (tests/support/longrun.py's helpers too)
GATES = {"ROCKETLAKE_FAULTS": ("ROCKETLAKE_FAULTS", "faults_only", "faults_test"),
         "CRASH_POINTS": ("CRASH_POINTS",),
         "ROCKETLAKE_BACKENDS": ("ROCKETLAKE_BACKENDS",),
         "ROCKETLAKE_MIRROR": ("ROCKETLAKE_MIRROR",),
         "ROCKETLAKE_STREAMING_FULL": ("ROCKETLAKE_STREAMING_FULL", "streaming_test")}


def _recipes() -> dict[str, str]:
    text = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read().replace("\\\n", " ")
    recipes: dict[str, str] = {}
    target = None
    for line in text.split("\n"):
        head = re.match(r"^([a-z0-9-]+):", line)
        if head:
            target = head.group(1)
            recipes[target] = ""
        elif line.startswith("\t") and target is not None:
            recipes[target] += line + "\n"
        elif not line.startswith("#"):
            target = None
    return recipes


def _test_files() -> list[str]:
    found = []
    for folder, _dirs, names in os.walk(os.path.join(ROOT, "tests")):
        found += [os.path.relpath(os.path.join(folder, n), ROOT) for n in names
                  if n.startswith("test_") and n.endswith(".py")]
    return sorted(p for p in found if not p.startswith("tests/house/"))       # these read the Makefile


def _runs(recipe: str) -> set[str]:
    return set(re.findall(r"(tests/\S+\.py)", recipe))


def test_every_gated_test_file_is_named_by_a_target_that_opens_its_gate():
    recipes = _recipes()
    assert "tests/e2e/test_ingest_faults.py" in _runs(recipes["faults"])      # the parse reads the recipes
    missing = []
    for path in _test_files():
        text = open(os.path.join(ROOT, path), encoding="utf-8").read()
        for gate, names in GATES.items():
            if not any(n in text for n in names):
                continue
            targets = [t for t, r in recipes.items() if f"{gate}=" in r and path in _runs(r)]
            if not targets:
                missing.append(f"{path}: reads {gate}, and no target setting it runs the file")
    assert not missing, "\n".join(missing)


def test_test_files_import_the_helpers_as_the_support_package():
    """pytest puts the checkout and tests/ on the path (pyproject.toml), not tests/support/: a helper
    imported by its bare name fails only when its test runs, which for a gated test is in its target
    alone (the HDFS power cut's ``import hdfscluster`` did, in make backends)."""
    helpers = sorted(n[:-3] for n in os.listdir(os.path.join(ROOT, "tests", "support"))
                     if n.endswith(".py") and n != "__init__.py")
    bare = re.compile(rf"^\s*(?:import|from)\s+({'|'.join(helpers)})\b", re.M)
    found = []
    for path in _test_files() + ["tests/conftest.py"]:
        text = open(os.path.join(ROOT, path), encoding="utf-8").read()
        found += [f"{path}: {m.group(0).strip()}" for m in bare.finditer(text)]
    assert not found, "\n".join(found)


def test_every_file_a_target_names_exists():
    for target, recipe in _recipes().items():
        for path in _runs(recipe):
            if path.startswith("tests/"):
                assert os.path.exists(os.path.join(ROOT, path)), (target, path)
