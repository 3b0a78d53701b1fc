"""The package's layout, as docs/development.md maps it: every module is in
one room, every import (those inside functions included) goes to a room
above or the same one, the rooms said to load no TensorFlow load none, and
the run folder's file names are spelled in one place."""

import ast
import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "keras_transformer"
MAP = ROOT / "docs" / "development.md"
HEAVY = ("tensorflow", "keras", "jax", "torch")


def _modules():
    """Every module of the package: dotted name -> path."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _rooms():
    """The module map's rows, in order: `(names, TensorFlow column)`, each
    name a module (`cli`) or a package (`layers/`)."""
    text = MAP.read_text(encoding="utf-8")
    table = text.split("## The module map", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return [(re.findall(r"`([^`]+)`", cells[1]), cells[3].strip())
            for cells in (row.split("|") for row in rows)]


def _room_of(module, rooms):
    """The index of the room holding `module` (the package root: -1)."""
    if module == "keras_transformer":
        return -1
    relative = module.removeprefix("keras_transformer.")
    for index, (names, _) in enumerate(rooms):
        for name in names:
            if relative == name.rstrip("/") or (name.endswith("/")
                                                and relative.startswith(name[:-1] + ".")):
                return index
    return None


def _imports(path, modules):
    """The package's modules `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if f"{node.module}.{alias.name}" in modules)
    return {name for name in found if name in modules}


def test_every_module_is_in_one_room_and_imports_only_from_rooms_above():
    rooms, modules = _rooms(), _modules()
    assert len(rooms) >= 10
    homeless = [name for name in modules if _room_of(name, rooms) is None]
    assert homeless == [], "modules the map in docs/development.md does not place"
    upward = []
    for name, path in modules.items():
        room = _room_of(name, rooms)
        for imported in _imports(path, modules):
            if _room_of(imported, rooms) > room:
                upward.append(f"{name} -> {imported}")
    assert upward == [], "imports from a room below"


def test_the_map_names_only_modules_that_exist():
    modules = {name.removeprefix("keras_transformer.") for name in _modules()}
    for names, _ in _rooms():
        for name in names:
            assert name.rstrip("/") in modules, name


def test_the_rooms_without_tensorflow_import_none():
    """Each module of a room whose TensorFlow column says "no" is imported
    in turn in one fresh process, and none brings TensorFlow, Keras, JAX or
    PyTorch; a module the column names (in backticks) may, and is left out."""
    rooms, modules = _rooms(), _modules()
    chosen = []
    for index, (_, column) in enumerate(rooms):
        if column.startswith("no"):
            allowed = set(re.findall(r"`([^`]+)`", column))
            chosen += [name for name in modules if _room_of(name, rooms) == index
                       and name.rsplit(".", 1)[-1] not in allowed]
    assert "keras_transformer.runtimes.onnx_runner" in chosen
    assert "keras_transformer.serving.app" in chosen
    code = (f"import importlib, json, sys\nheavy = {HEAVY!r}\nfor name in {chosen!r}:\n"
            "    importlib.import_module(name)\n"
            "    loaded = [m for m in heavy if m in sys.modules]\n"
            "    if loaded:\n"
            "        print(json.dumps([name, loaded])); break\n"
            "else:\n    print(json.dumps(None))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) is None


RUN_FOLDER_NAMES = ("run.json", "model.keras", "averaged.keras", "pretrained.json",
                    "export.json", "tokenizer.model")


@pytest.mark.parametrize("name", RUN_FOLDER_NAMES)
def test_the_run_folder_s_file_names_are_spelled_in_at_most_two_modules(name):
    """As strings the code uses (not in docstrings or messages): paths are
    built by `run_folder` (and our tokenizer's file by its vocabulary)."""
    spelling = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        if any(isinstance(node, ast.Constant) and node.value == name
               and id(node) not in docstrings for node in ast.walk(tree)):
            spelling.append(module)
    assert len(spelling) <= 2, spelling


def test_the_exporter_is_the_loop_and_the_benchmarks_page_a_reference():
    """Each format writes and checks itself in its own module, so the
    exporter stays a loop over them; the Benchmarks page gives the current
    figures, its log the history."""
    assert len((PACKAGE / "export" / "exporter.py").read_text().splitlines()) <= 250
    assert len((ROOT / "docs" / "benchmarks.md").read_text().splitlines()) <= 300
