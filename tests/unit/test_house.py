"""The package's layout: no import cycles between compgen's modules, and no module too long to read in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "compgen"
MAX_MODULE_LINES = 450


def module_name(path: Path) -> str:
    """``src/compgen/training/trainer.py`` -> ``compgen.training.trainer`` (a package is its ``__init__``)."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_files() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported (not those inside functions or ``if TYPE_CHECKING``)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and not _type_checking_only(node):
            pending.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            pending.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
    return found


def every_import(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import of a module, also those inside functions and ``if TYPE_CHECKING``: the layers it leans on."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def import_graph(imports=top_level_imports) -> dict[str, set[str]]:
    """For every compgen module, the compgen modules it imports (at import time, or as ``imports`` finds them)."""
    modules = module_files()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # ``from . import x`` names a submodule when there is one, else an attribute of the package.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            edges.update(target for target in targets if target in modules and target != name)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm): each is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
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


def test_the_graph_sees_the_training_layers():
    graph = import_graph()
    assert "compgen.training.config" in graph["compgen.training.trainer"]
    assert "compgen.training.tasks.base" in graph["compgen.training.trainer"]
    assert "compgen.training.checkpoint" in graph["compgen.training.run_directory"]
    assert "compgen.training.trainer" in graph["compgen.launch.run_setup"]


def test_training_holds_the_loop_and_launch_the_command_line_setup():
    """The loop neither claims its output directory nor resolves ``--init_from``: the command-line layer above it
    does, each in one place (``launch.directory_claim.start_run``, ``launch.init_from.check_init_from``); the tasks are
    their own subpackage; the trainer is well under the length limit."""
    graph = import_graph(every_import)
    training = {name: targets for name, targets in graph.items() if name.startswith("compgen.training")}
    assert not any(target.startswith("compgen.launch") for targets in training.values() for target in targets)
    sources = {name: path.read_text() for name, path in module_files().items()}
    claimers = sorted(name for name, text in sources.items() if "claim_run_directory(" in text
                      and name not in {"compgen.launch.directory_claim", "compgen.studies.orchestration"})
    assert claimers == [], f"an output directory claimed outside launch.directory_claim: {claimers}"
    resolvers = sorted(name for name, text in sources.items() if "resolve_initial_weights(" in text)
    assert resolvers == ["compgen.launch.init_from"], f"--init_from resolved outside launch.init_from: {resolvers}"
    task_modules = {name for name in module_files() if name.startswith("compgen.training.tasks.")}
    assert {"compgen.training.tasks.base", "compgen.training.tasks.latent_tokenizer"} <= task_modules
    assert not [name for name in module_files() if name.startswith("compgen.training.") and name.endswith("_task")]
    assert len(sources["compgen.training.trainer"].splitlines()) <= 0.8 * MAX_MODULE_LINES


def test_no_import_cycles():
    """Not at import time, and not through imports deferred into functions or kept for type checking either."""
    for graph in (import_graph(), import_graph(every_import)):
        cycles = import_cycles(graph)
        assert not cycles, "import cycles between compgen modules: " + "; ".join(" <-> ".join(c) for c in cycles)


LAYERS = [
    {"concepts", "solids", "shapes", "clips", "scenes", "images", "atomic_io", "hub", "eval_mode", "option_names",
     "families", "__init__"},
    {"data"}, {"cli"}, {"models"}, {"schedulers"}, {"pipelines"}, {"evaluation"}, {"training"}, {"analysis"},
    {"launch"}, {"recipes", "train"}, {"studies"}, {"quickstart"},
]
"""compgen's packages and top modules from the bottom up (ARCHITECTURE.md's table, top row first): each imports only
its own layer and those below (the package ``compgen/__init__`` re-exports lazily, so it sits at the bottom)."""


def test_imports_point_down_the_layers():
    rank = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}

    def unit(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    upward = sorted(f"{module} -> {target}" for module, targets in import_graph(every_import).items()
                    for target in targets if rank[unit(target)] > rank[unit(module)])
    assert set(rank) >= {unit(module) for module in module_files()}, "a new package: give it a layer in LAYERS"
    assert not upward, f"imports that point up the layers: {upward}"


def test_cycle_finder_finds_a_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_too_long_to_read_in_one_sitting():
    lengths = {name: len(path.read_text().splitlines()) for name, path in module_files().items()}
    long = {name: lines for name, lines in lengths.items() if lines > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


def test_every_command_parses_with_the_shared_parser():
    """Every command (src/, examples/, benchmarks/) builds its parser from ``compgen.cli.ArgumentParser`` (one option
    spelling, the old one warned); plain ``argparse`` only for the pre-parsers that peek at one option."""
    repo = SRC.parent
    plain = []
    for folder in ("src", "examples", "benchmarks", "dataset_scripts"):
        for path in sorted((repo / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if "argparse.ArgumentParser(" in line and "add_help=False" not in line and path.name != "cli.py":
                    plain.append(f"{path.relative_to(repo)}:{number}")
    assert plain == []


def test_the_recipes_choices_are_their_owners_constants():
    """An option's choices are its owner's constant (``MASKING_SCHEDULES``, ``PREDICTION_TYPES``, ...), never a list
    copied into a recipe: the owner and the command line cannot drift apart."""
    copied = [f"{path.relative_to(SRC)}:{number}" for folder in ("recipes", "launch")
              for path in sorted((SRC / "compgen" / folder).glob("*.py"))
              for number, line in enumerate(path.read_text().splitlines(), start=1) if "choices=[" in line]
    assert copied == []


def test_a_run_on_shapes_imports_no_celeba_or_clips_module(tmp_path):
    """Issue 75, item 4: a run on the shapes data entered the CelebA modules (for the choices of one flag) and the
    clips builder (for a name check before the shapes configs'). The command line and the data of a shapes run now
    import neither; the CelebA configs named in ``compgen.cli`` are the builder's."""
    import subprocess
    import sys

    from compgen.cli import CELEBA_CONFIG_NAMES
    from compgen.data.celeba import CelebAConcepts

    assert list(CELEBA_CONFIG_NAMES) == sorted(CelebAConcepts.builder_configs)
    code = (
        "import sys\n"
        "from compgen.cli import ArgumentParser, add_celeba_arguments\n"
        "from compgen.recipes import load_recipe\n"
        "from compgen.data.loading import load_concept_dataset\n"
        "add_celeba_arguments(ArgumentParser()); load_recipe('tuple-unet')\n"
        f"load_concept_dataset('okawa-h32-train1', cache_dir={str(tmp_path)!r}, images_per_class=2, "
        "test_images_per_class=1, tokenizer_images_per_class=1)\n"
        "print(sorted(m for m in sys.modules if m.startswith('compgen') and ('celeba' in m or 'clip' in m)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
