"""``pybcache/_csrc.py``: where the C a user's machine compiles comes from (the package's copy, else the source
tree's), on temporary trees."""
from __future__ import annotations

from pathlib import Path

import pytest

from pybcache import _csrc


@pytest.fixture
def trees(tmp_path, monkeypatch):
    """A stand-in package folder (tmp/pybcache) beside a stand-in checkout (tmp/csrc, tmp/examples)."""
    monkeypatch.setattr(_csrc, "_PACKAGE", tmp_path / "pybcache")
    return tmp_path


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    return path


def test_the_c_sources_are_the_packages_copy_else_the_source_trees(trees):
    tree_copy = _touch(trees / "csrc" / "kpatch" / "kpatch_rt.c")
    assert _csrc.csrc_path("kpatch/kpatch_rt.c") == tree_copy
    pkg_copy = _touch(trees / "pybcache" / "csrc" / "kpatch" / "kpatch_rt.c")
    assert _csrc.csrc_path("kpatch/kpatch_rt.c") == pkg_copy


def test_a_folder_in_place_of_a_c_source_is_refused(trees):
    (trees / "csrc" / "kpatch" / "kpatch_rt.c").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="reinstall pybcache"):
        _csrc.csrc_path("kpatch/kpatch_rt.c")


def test_missing_c_sources_name_both_places_and_say_to_reinstall(trees):
    with pytest.raises(FileNotFoundError) as e:
        _csrc.csrc_dir()
    assert str(e.value) == (f"csrc/: neither {trees / 'pybcache' / 'csrc'} nor {trees / 'csrc'} exists "
                            "(a broken install: reinstall pybcache)")


def test_sources_mk_is_read_in_order_with_comments_dropped(trees):
    mk = trees / "csrc" / "sources.mk"
    mk.parent.mkdir(parents=True)
    mk.write_text("# a comment = not a variable\nA = x.c y.c  # trailing\n\nB=z.c\n")
    assert _csrc.read_sources_mk(mk) == {"A": ["x.c", "y.c"], "B": ["z.c"]}
    assert _csrc.sources("B", "A") == [trees / "csrc" / n for n in ("z.c", "x.c", "y.c")]
    with pytest.raises(KeyError, match="does not define C"):
        _csrc.sources("A", "C")


def test_the_real_c_sources_that_ship_exist():
    for path in [*_csrc.sources("PYB_CORE_SRC", "PYB_MODEL_SRC"), _csrc.csrc_path("kpatch/kpatch_rt.c"),
                 _csrc.csrc_path("nbdkit/pyb_nbdkit.c"), _csrc.csrc_path("kpatch/include/pybcache/kpatch.h")]:
        assert path.is_file()


def test_the_example_patches_are_the_packages_copy_else_the_trees_by_stem_sorted(trees):
    assert _csrc.example_patches() == {}
    b = _touch(trees / "examples" / "patches" / "b.c")
    a = _touch(trees / "examples" / "patches" / "a.c")
    _touch(trees / "examples" / "patches" / "notes.md")
    found = _csrc.example_patches()
    assert found == {"a": a, "b": b} and list(found) == ["a", "b"]
    z = _touch(trees / "pybcache" / "examples" / "patches" / "z.c")
    assert _csrc.example_patches() == {"z": z}
