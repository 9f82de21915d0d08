"""The report's template renderer (``pybcache/report/_template.py``) on small templates written here: how
blocks are cut and unwrapped, which files are refused, and what a missing value raises (fast: no experiment)."""
from __future__ import annotations

import pytest

from pybcache.report import _template


class _Files:
    """A stand-in for ``importlib.resources.files``: template files by name, and what was asked for."""

    def __init__(self, texts):
        self.texts, self.asked = texts, []

    def __call__(self, package):
        self.asked.append(package)
        return self

    def joinpath(self, *parts):
        self.asked.append(parts)
        return self

    def read_text(self, encoding):
        assert encoding == "utf-8"
        name = self.asked[-1][1]
        if name not in self.texts:
            raise FileNotFoundError(name)          # as the real package resources do
        return self.texts[name]


@pytest.fixture
def templates(monkeypatch):
    files = _Files({})
    monkeypatch.setattr(_template, "resources", type("R", (), {"files": staticmethod(files)}))
    _template._blocks.cache_clear()
    yield files.texts
    _template._blocks.cache_clear()


def test_a_template_file_is_cut_into_its_named_blocks_each_unwrapped_without_trailing_newlines(templates):
    templates["t.md"] = ("<!-- block one -->\nfirst\nline\n\n\n<!-- block two_2 -->\n# head\n- a\n  b\n\n"
                         "<!-- block three -->\n")
    assert _template._blocks("t") == {"one": "first line", "two_2": "# head\n- a   b", "three": ""}


def test_a_block_marker_must_be_a_whole_line_of_a_lower_case_name(templates):
    templates["t.md"] = "<!-- block a -->\nx <!-- block b -->\n<!-- block C -->\ny\n"
    assert _template._blocks("t") == {"a": "x <!-- block b --> <!-- block C --> y"}


def test_blank_text_before_the_first_block_is_allowed_other_text_is_refused(templates):
    templates["ok.md"] = "\n  \n<!-- block a -->\nx\n"
    assert _template._blocks("ok") == {"a": "x"}
    templates["bad.md"] = "stray\n<!-- block a -->\nx\n"
    with pytest.raises(ValueError, match=r"^report template bad\.md: text before the first "
                                         r"'<!-- block NAME -->' line$"):
        _template._blocks("bad")


def test_a_block_defined_twice_is_refused(templates):
    templates["t.md"] = "<!-- block a -->\nx\n<!-- block a -->\ny\n"
    with pytest.raises(ValueError, match=r"^report template t\.md: block 'a' defined twice$"):
        _template._blocks("t")


def test_a_template_file_is_read_once(templates):
    templates["t.md"] = "<!-- block a -->\nx\n"
    assert _template._blocks("t") is _template._blocks("t")


@pytest.mark.parametrize("text, out", [
    ("a\nb\nc", "a b c"),
    ("a\n\nb", "a\n\nb"),                                   # a blank line ends a paragraph
    ("# h\nb", "# h b"),                                     # a heading line takes a continuation
    ("a\n# h\n- i\n| t |\n![x](y)\n```\nz\n```", "a\n# h\n- i\n| t |\n![x](y)\n```\nz\n```"),
    ("```\na\nb\n```\nc\nd", "```\na\nb\n```\nc d"),       # nothing joined inside a fence or onto it
    ("-x\ny", "-x y"),                                       # "- " with its space starts a list item
    ("", ""),
])
def test_unwrap_joins_paragraph_lines_and_keeps_markdown_block_lines(text, out):
    assert _template._unwrap(text) == out


def test_render_substitutes_fields_with_their_formats_and_literal_braces(templates):
    templates["f.md"] = "<!-- block b -->\n{n:,} {x:.2f} {row[k]} {obj.real} {{lit}}\n"
    assert _template.render("f.b", n=12345, x=1.5, row={"k": "v"}, obj=3) == "12,345 1.50 v 3 {lit}"


@pytest.mark.parametrize("block, values, field", [
    ("k", {}, "'n[k]'"), ("k", {"n": {}}, "'n[k]'"),
    # an index or attribute: the field as written, not Python's message
    ("i", {"n": []}, "'n[0]'"), ("a", {"n": 1}, "'n.nope'"),
])
def test_a_missing_value_key_index_or_attribute_is_a_missing_value_naming_the_block(templates, block, values, field):
    templates["f.md"] = "<!-- block k -->\n{n[k]}\n<!-- block i -->\n{n[0]}\n<!-- block a -->\n{n.nope}\n"
    with pytest.raises(_template.MissingValue) as info:
        _template.render(f"f.{block}", **values)
    assert str(info.value) == f"report template 'f.{block}': no value for {field}"
    assert isinstance(info.value, KeyError) and info.value.__cause__ is None and info.value.__suppress_context__


def test_an_unknown_block_or_file_is_a_key_error_naming_it(templates):
    templates["f.md"] = "<!-- block b -->\nx\n"
    for name in ("f.nope", "f"):
        with pytest.raises(KeyError) as info:
            _template.render(name)
        assert info.value.args == (f"no report template block {name!r}",) and info.value.__suppress_context__


def test_a_template_name_is_cut_at_its_first_dot_so_a_dotted_block_name_is_no_block(templates):
    templates["f.md"] = "<!-- block b -->\nx\n"
    with pytest.raises(KeyError, match=r"no report template block 'f\.b\.c'"):
        _template.render("f.b.c")                 # block "b.c" of f.md, not block "c" of a file f.b.md


class _Bare(dict):
    """A mapping whose every lookup raises a KeyError without arguments."""

    def __getitem__(self, key):
        raise KeyError


def test_a_value_that_raises_a_bare_key_error_is_a_missing_value_naming_the_field(templates):
    templates["f.md"] = "<!-- block b -->\n{n[k]}\n"
    with pytest.raises(_template.MissingValue) as info:
        _template.render("f.b", n=_Bare())
    assert str(info.value) == "report template 'f.b': no value for 'n[k]'"


def test_a_field_missing_only_inside_a_format_spec_is_named_by_the_lookup_error_else_unnamed(templates):
    templates["f.md"] = "<!-- block b -->\n{x:{width}}\n<!-- block c -->\n{x:{w[k]}}\n"
    with pytest.raises(_template.MissingValue) as info:
        _template.render("f.b", x=1)
    assert str(info.value) == "report template 'f.b': no value for 'width'"
    with pytest.raises(_template.MissingValue) as info:
        _template.render("f.c", x=1, w=_Bare())
    assert str(info.value) == "report template 'f.c': no value for '?'"
