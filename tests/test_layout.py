"""The package's layout: the pipeline in the folders, data flowing one way, small rooms.

`gpuci/` holds the shared model and the command line; the stages are packages, in the
order data flows through them (PACKAGES); a stage split by job is subpackages, in their
own flow order (`run.disk`, `run.proc`, `run.sched`). A package's module imports only the
shared `model` and `formats`, the packages before its own, and the modules of its own
package listed before it; a lazy import inside a function counts too. The top-level modules after
the packages (the command line, the check, the child-side plugin) may import any package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gpuci"
# the shared types and files, for all
SHARED = ("terminal", "shell", "steps", "processes", "model", "formats", "evidence_file")
# every kind of evidence: a module of evidence/kinds/ besides its Protocol and its engine,
# or a subpackage of it where the kind is big (KIND_PACKAGES)
KINDS = tuple(
    sorted(
        p.stem if p.suffix == ".py" else p.name
        for p in (ROOT / "evidence" / "kinds").iterdir()
        if (p.suffix == ".py" and p.stem not in ("__init__", "kind", "engine"))
        or (p / "__init__.py").is_file()
    )
)
# A kind that is a subpackage: its modules in their one-way order. The subpackage stands in
# the flow where its kind does: it may import what a kind may (the shared evidence and the
# kinds' Protocol, never another kind) and its own modules listed before each.
KIND_PACKAGES: dict[str, tuple[str, ...]] = {
    # the searches of a round's order-dependent victims (replayed, paired where a replay
    # shows nothing), their runs started ahead, and the kind the engine lists
    "evidence.kinds.culprit_search": ("culprits", "prepared", "kind"),
    # a depends-on-others victim with the suite's other files collected, its search, its
    # runs started ahead, and the kind the engine lists
    "evidence.kinds.provider_search": ("collected", "providers", "prepared", "kind"),
}
# The stages in the order data flows, each with its modules in their own one-way order.
PACKAGES: dict[str, tuple[str, ...]] = {
    # the state ledger: the child's snapshots (host, device, changes, recorder), then what the
    # parent reads of them (left) and what a failure points at (hints)
    "state": ("host", "device", "changes", "modules", "recorder", "left", "hints"),
    # run/ is split by job: what a run leaves on disk, one interpreter from start to end,
    # then what runs where and when; a subpackage may import the ones before it
    "run.disk": (
        "masking",
        "outdir",
        "side_outputs",
        "durations",
        "resume",
    ),
    "run.proc": (
        "seed",
        "gpus",
        "reaper",
        "ledger",
        "holders",
        "strays",
        "supervisor",
        "spawn",
        "plugin_env",
        "discover",
        "gpumem",
        "handshake",
        "waits",
        "ids",
        "reports",
        "logs",
        "journal",
        "launch",
        "held",
        "deadline",
        "endings",
        "attempts",
        "interpreter",
    ),
    "run.sched": (
        "modes",
        "options",
        "views",
        "plan",
        "compiles",
        "source_tests",
        "pace",
        "junit",
        "progress",
        "unit",
        "pool",
        "learning",
        "session",
        "one_mode",
        "screens",
        "plan_mode",
        "beside",
    ),
    "evidence": (
        "poison",
        "results",
        "orders",
        "reproduce",
        "fingerprints",
        "notes",
        "claims",
        "classify",
        "latent",
        "admission",
        "account",
        "requests",
        "ahead",
        "probe",
        "context",
        "alone",
        "beside",
        "victims",
        "pairs",
        "poisoned",
        "likely",
        "strict",
        "memcheck",
        "sanitizer",
        "budget",
        "early",
        "mode_reruns",
    ),
    # what the culprit and provider searches share (a kind imports no other kind): a
    # search's record and step, its claim's run repeated, the speculated levels, the
    # halvings (by files first, checked where refuted, the bisection), the hints, and a
    # round's searches in waves
    "evidence.search": (
        "step",
        "repeat",
        "waves",
        "by_files",
        "checked",
        "bisect",
        "source_hints",
        "hinted",
        "schedule",
    ),
    # the kinds of evidence, each built from the shared parts above, behind one Protocol
    # (kind), and the engine that lists them: a kind imports no other kind (`_allowed`), so
    # adding one touches its module and the engine's list, not this one (tests/test_kinds.py)
    "evidence.kinds": ("kind", *KINDS, "engine"),
    "verdict": (
        "merge",
        "describe",
        "causes",
        "skips",
        "left_behind",
        "policy",
        "diff",
        "roots",
        "ended",
        "plain_run",
    ),
    "report": (
        "groups",
        "summary",
        "escape",
        "timeline",
        "cards",
        "rows",
        "report_data",
        "comment_data",
        "render",
    ),
    "gitlab": ("client", "notes", "publish", "baseline"),
}
# After the packages: these may import any of them, and the ones before them here.
ON_TOP = (
    "config",
    "options",
    "pytest_plugin",
    "judge",
    "lazy_isolated",
    "check",
    "arguments",
    "pytest_options",
    "cli",
    "__main__",
)
# Loaded into every test interpreter (the plugin and its poisoning): each must stay cheap
# and self-contained.
CHILD_SIDE = (
    "pytest_plugin",
    "evidence.poison",
    "run.proc.handshake",
    "run.proc.waits",
    "run.proc.ids",
    "run.proc.reports",
    "run.proc.plugin_env",
    "state.host",
    "state.device",
    "state.changes",
    "state.modules",
    "state.recorder",
)
MAX_MODULE_LINES = 400
# Modules whose one concept is longer than the cap: cut in two, each half would need the
# other to be read (a cap that splits a concept is worse than a long module).
LONGER_MODULES = {
    # the evidence's one runner: how it is built, the runs it starts, what a run did
    "evidence.probe": 500,
    # a pair search, shared by the pairs kind and the culprit search (where a replay shows
    # nothing): its runs, each confirmed, and which tests of the other side it may name
    "evidence.pairs": 500,
    # the shared vocabulary: the types the stages hand each other (run.json's among them)
    "model": 420,
}
MAX_FUNCTION_LINES = 80


def _name(path: Path) -> str:
    """`run.sched.plan` for gpuci/run/sched/plan.py, `model` for gpuci/model.py."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts)


def _modules() -> list[str]:
    return sorted(_name(p) for p in ROOT.rglob("*.py"))


def _packages() -> list[str]:
    """Every package under gpuci/, nested ones too (`run`, `run.proc`); `` for gpuci."""
    return sorted(_name(p.parent / "x.py").rpartition(".")[0] for p in ROOT.rglob("__init__.py"))


def _parents(package: str) -> set[str]:
    """The packages that hold `package`: {`run`} for `run.proc`."""
    parts = package.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _path(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def _imports_in(source: str, module: str) -> set[str]:
    """The gpuci modules `source` imports (`run.sched.plan`, `model`), at the top or in
    functions; a module imported from its package (`from gpuci.run.sched import plan`,
    `from gpuci.run import proc`) counts as that module or subpackage."""
    holders = {"", *PACKAGES, *KIND_PACKAGES, *(p for name in PACKAGES for p in _parents(name))}
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"gpuci/{module}: a relative import; spell it gpuci.…"
            if node.module == "gpuci" or (node.module or "").startswith("gpuci."):
                base = (node.module or "").removeprefix("gpuci").removeprefix(".")
                for alias in node.names:
                    if alias.name == "__version__":
                        continue
                    found.add(f"{base}.{alias.name}" if base in holders else base)
        elif isinstance(node, ast.Import):
            found.update(
                a.name.removeprefix("gpuci.") for a in node.names if a.name.startswith("gpuci.")
            )
    return {name.lstrip(".") for name in found}


def _gpuci_imports(module: str) -> set[str]:
    """The gpuci modules `module` imports, at the top or in functions."""
    return _imports_in(_path(module).read_text(encoding="utf-8"), module)


def _members(package: str, members: tuple[str, ...]) -> list[str]:
    """`members` of `package` as modules, a kind's subpackage as its own modules too."""
    named = [f"{package}.{m}" for m in members]
    return [*named, *(f"{n}.{m}" for n in named if n in KIND_PACKAGES for m in KIND_PACKAGES[n])]


def _allowed(module: str) -> set[str]:
    """What `module` may import: SHARED, then every module that comes before it (the
    packages before its own, with the packages that hold them, and its own package's
    modules listed before it). A kind may import the kinds' Protocol and no other kind;
    a module of a kind's subpackage, what its kind may and its own modules before it."""
    if module in SHARED:
        return set(SHARED[: SHARED.index(module)])
    package, _, own = module.rpartition(".")
    if package in KIND_PACKAGES:
        members = KIND_PACKAGES[package]
        return _allowed(package) | set(_members(package, members[: members.index(own)]))
    allowed = set(SHARED)
    for name, members in PACKAGES.items():
        if name == package:
            earlier = members[: members.index(own)]
            if name == "evidence.kinds" and own in KINDS:
                earlier = ("kind",)  # its Protocol; another kind only through the engine
            return allowed | set(_members(name, earlier))
        allowed |= {name, *_parents(name), *_members(name, members)}
    return allowed | set(ON_TOP[: ON_TOP.index(module)])


def _ordered() -> list[str]:
    staged = [
        f"{p}.{m}.{x}" if f"{p}.{m}" in KIND_PACKAGES else f"{p}.{m}"
        for p, members in PACKAGES.items()
        for m in members
        for x in KIND_PACKAGES.get(f"{p}.{m}", ("",))
    ]
    return [*SHARED, *staged, *ON_TOP]


def test_every_module_has_a_place_in_the_flow() -> None:
    inits = {f"{p}.__init__".lstrip(".") for p in _packages()}
    assert sorted(_ordered()) == sorted(set(_modules()) - inits)


def test_the_packages_are_the_stages_in_order() -> None:
    # a package holds modules (a stage, in PACKAGES) or only the subpackages of its stage
    holders = {p for name in PACKAGES for p in _parents(name)}
    assert [p for p in _packages() if p] == sorted({*PACKAGES, *KIND_PACKAGES, *holders})
    # a stage may hold a subpackage after its own modules (evidence.kinds, built from
    # evidence's parts); a holder that is no stage holds only subpackages (run)
    for holder in holders - set(PACKAGES):
        assert not [
            p for p in ROOT.joinpath(*holder.split(".")).glob("*.py") if p.name != "__init__.py"
        ], f"gpuci/{holder}: modules beside subpackages"
    # a stage's subpackages stand together in the flow
    stages = [name.partition(".")[0] for name in PACKAGES]
    runs = [s for i, s in enumerate(stages) if i == 0 or s != stages[i - 1]]
    assert len(runs) == len(set(runs)), f"a stage's subpackages apart in PACKAGES: {runs}"


@pytest.mark.parametrize("module", _ordered())
def test_imports_flow_one_way(module: str) -> None:
    later = _gpuci_imports(module) - _allowed(module)
    assert not later, f"gpuci/{module}: imports {sorted(later)}: later, or another kind"


@pytest.mark.parametrize("package", _packages())
def test_a_package_imports_nothing_as_it_loads(package: str) -> None:
    # every child interpreter loads gpuci/__init__, gpuci/evidence/__init__ (the plugin's
    # poisoning), gpuci/run/__init__ and gpuci/run/proc/__init__ (its waits and ids); every
    # package stays as light, so importing one module costs that module
    init = ROOT.joinpath(*package.split(".")) / "__init__.py" if package else ROOT / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    imports = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Import) or (isinstance(n, ast.ImportFrom) and n.module != "__future__")
    ]
    assert not imports, f"{init} imports something"


@pytest.mark.parametrize("module", CHILD_SIDE)
def test_the_child_side_imports_nothing_of_gpuci(module: str) -> None:
    assert _gpuci_imports(module) <= set(CHILD_SIDE)


def test_the_import_rule_catches_a_later_package() -> None:
    # the rule itself: evidence may import run, never verdict; a lazy import counts
    assert "run.sched.plan" in _allowed("evidence.probe")
    assert "verdict.diff" not in _allowed("evidence.probe")
    assert "evidence.kinds.engine" not in _allowed("evidence.probe")
    assert "run.sched.session" in _gpuci_imports("evidence.kinds.engine")
    assert {"check", "report.render"} <= _gpuci_imports("cli")  # lazy, inside functions


def test_a_kind_imports_no_other_kind() -> None:
    # a kind (a module, or each module of its subpackage) reaches another only through the
    # engine: where two kinds share a function, it is shared evidence, before the kinds
    assert "evidence.kinds.kind" in _allowed("evidence.kinds.threads")
    assert "evidence.kinds.groups" not in _allowed("evidence.kinds.threads")  # listed before
    assert "evidence.kinds.culprit_search.kind" not in _allowed("evidence.kinds.threads")
    culprits = "evidence.kinds.culprit_search.culprits"
    assert {"evidence.kinds.kind", "evidence.search.bisect"} <= _allowed(culprits)
    assert "evidence.kinds.culprit_search.kind" not in _allowed(culprits)  # listed after
    assert "evidence.kinds.groups" not in _allowed(culprits)
    assert "evidence.kinds.provider_search.collected" not in _allowed(culprits)
    # what both searches share is shared evidence: it may import no kind
    assert not {m for m in _allowed("evidence.search.schedule") if m.startswith("evidence.kinds")}
    assert "evidence.kinds.culprit_search.kind" in _allowed("evidence.kinds.engine")
    # every kind is in the flow, a subpackage's modules each in their place
    assert {"culprit_search", "provider_search", "groups", "threads"} <= set(KINDS)
    assert "evidence.kinds.culprit_search.culprits" in _ordered()


def test_the_import_rule_holds_inside_run() -> None:
    # run's subpackages flow one way too: sched may import proc and disk, proc only disk
    assert {"run.proc.spawn", "run.disk.outdir", "run.proc", "run"} <= _allowed("run.sched.plan")
    assert "run.sched.plan" not in _allowed("run.proc.interpreter")
    assert "run.proc.spawn" not in _allowed("run.disk.outdir")
    assert "run.proc.held" not in _allowed("run.proc.launch")  # listed after it
    assert "run.proc.reaper" in _gpuci_imports("run.proc.spawn")
    # every spelling of an import of a nested module names that module
    source = (
        "from gpuci.run.proc import spawn\n"
        "from gpuci.run.proc.reaper import start_child\n"
        "from gpuci.run import sched\n"
        "import gpuci.run.disk.outdir\n"
    )
    found = _imports_in(source, "example")
    assert found == {"run.proc.spawn", "run.proc.reaper", "run.sched", "run.disk.outdir"}
    assert found - _allowed("run.proc.interpreter") == {"run.sched"}


@pytest.mark.parametrize("module", _modules())
def test_modules_and_functions_stay_small(module: str) -> None:
    source = _path(module).read_text(encoding="utf-8")
    lines = source.splitlines()
    cap = LONGER_MODULES.get(module, MAX_MODULE_LINES)
    assert len(lines) <= cap, f"gpuci/{module} has {len(lines)} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            # a longer function says why on its first line, in a comment
            if length > MAX_FUNCTION_LINES:
                assert "--" in lines[node.lineno - 1].partition("#")[2], (
                    f"gpuci/{module}: {node.name} has {length} lines and no reason given"
                )


def test_gpucis_own_process_loads_no_pytest() -> None:
    # gpuci runs pytest only in the interpreters it starts; importing it in its own process
    # too cost every command (and every check) a quarter of its start-up
    probe = (
        "import sys, gpuci.cli, gpuci.check; print(sorted(m for m in sys.modules if 'pytest' in m))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout
