"""The writeback package's module layout (issue #11): split along the kernel's files, no import cycle, the
old module names still importable."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import pybcache.writeback

PACKAGE = Path(pybcache.writeback.__file__).parent

KERNEL_FILES = {
    "memcontrol": "mm/memcontrol.c",
    "memcg_writeback": "mm/memcontrol.c",
    "page_writeback": "mm/page-writeback.c",
    "fs_writeback": "fs/fs-writeback.c",
    "bdev_flush": "block/bdev.c",
}


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports, counting imports under ``if TYPE_CHECKING`` too (a cycle
    hidden from the interpreter is still a cycle for a reader and the type checker)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(package.glob("*.py")):
        name = path.stem
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    graph[name].add(node.module.split(".")[0])
                else:
                    graph[name].update(alias.name for alias in node.names)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None."""
    state: dict[str, int] = {}          # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_through_a_type_checking_import(tmp_path):
    (tmp_path / "a.py").write_text("from .b import X\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import Y\n")
    assert find_cycle(import_graph(tmp_path)) == ["a", "b", "a"]


def test_the_writeback_modules_import_each_other_without_a_cycle():
    graph = import_graph(PACKAGE)
    assert {"model", "entities", "memcontrol", "page_writeback", "fs_writeback", "bdev_flush"} <= set(graph)
    assert find_cycle(graph) is None


def test_the_foreign_records_import_nothing_of_the_model():
    model_modules = {"model", "entities", "_base", "page_writeback", "fs_writeback", "memcg_writeback",
                     "bdev_flush", "simulation", "experiment"}
    assert import_graph(PACKAGE)["memcontrol"].isdisjoint(model_modules)


def test_the_behaviour_modules_import_no_other_behaviour_module():
    behaviour = {"page_writeback", "fs_writeback", "memcg_writeback", "bdev_flush"}
    graph = import_graph(PACKAGE)
    for name in behaviour:
        assert graph[name].isdisjoint(behaviour - {name}), name


@pytest.mark.parametrize("module, kernel_file", sorted(KERNEL_FILES.items()))
def test_each_module_named_after_a_kernel_file_names_it_in_its_docstring(module, kernel_file):
    doc = importlib.import_module(f"pybcache.writeback.{module}").__doc__
    assert doc is not None and kernel_file in doc


def test_the_old_module_names_still_export_the_same_objects():
    from pybcache.writeback import memcontrol, model
    from pybcache.writeback import memcontrol as foreign

    for name in foreign.__all__:
        assert getattr(foreign, name) is getattr(memcontrol, name)
    for name in model.__all__:
        assert hasattr(model, name)
        if name in pybcache.writeback.__all__:
            assert getattr(model, name) is getattr(pybcache.writeback, name)
