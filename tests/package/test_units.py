"""pybcache.units: the one home of size constants, size parsing and the two printed forms."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pybcache
from pybcache import units
from pybcache.commands._util import UsageError, parse_size as cli_parse_size


def test_public_constants_are_the_units_modules():
    assert (pybcache.KiB, pybcache.MiB, pybcache.GiB, pybcache.TiB) == (1024, 1024**2, 1024**3, 1024**4)
    assert pybcache.TiB is units.TiB and pybcache.KiB is units.KiB


@pytest.mark.parametrize("text, expected", [
    ("512", 512), ("4K", 4096), ("4k", 4096), ("4KiB", 4096), ("4kb", 4096), (" 32M ", 32 << 20),
    ("10G", 10 << 30), ("1T", 1 << 40), ("1P", 1 << 50), (4096, 4096),
])
def test_parse_size_reads_binary_units(text, expected):
    assert units.parse_size(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("4X", "is not a size"), ("-4", "is not a size"), ("1.5G", "is not a size"), ("", "is not a size"),
    ("9" * 31, "is not a size"), ("0", "size must be > 0"), ("0K", "size must be > 0"),
])
def test_parse_size_refuses_bad_text_naming_the_argument(text, fragment):
    with pytest.raises(ValueError, match=f"^--chunk-size: .*{fragment}"):
        units.parse_size(text, name="--chunk-size")


def test_cli_parse_size_raises_the_same_message_as_a_usage_error():
    with pytest.raises(ValueError) as plain:
        units.parse_size("4X", name="--size")
    with pytest.raises(UsageError) as usage:
        cli_parse_size("4X", name="--size")
    assert str(usage.value) == str(plain.value)


@pytest.mark.parametrize("n, expected", [
    (0, "0 B"), (256, "256 B"), (1023, "1023 B"), (1024, "1 KiB"), (65792, "64.25 KiB"),
    (int(2.51 * (1 << 20)), "2.51 MiB"), (10 << 30, "10 GiB"), (3 << 40, "3 TiB"), (2048 << 40, "2048 TiB"),
])
def test_format_bytes_prints_the_posted_tables_style(n, expected):
    assert units.format_bytes(n) == expected


@pytest.mark.parametrize("x, expected", [
    (0, "0 B"), (512, "512 B"), (32 << 20, "32 MiB"), (1.5 * (1 << 30), "1.5 GiB"), (-4096, "-4 KiB"),
    (1 << 50, "1 PiB"), (4096 << 50, "4096 PiB"),
])
def test_bytes_label_is_the_plot_tick_form(x, expected):
    assert units.bytes_label(x) == expected


@settings(derandomize=True, max_examples=200)
@given(st.integers(min_value=1, max_value=1 << 20), st.sampled_from(["", "K", "M", "G", "T", "P"]))
def test_parse_size_of_a_formatted_whole_unit_round_trips(count, suffix):
    assert units.parse_size(f"{count}{suffix}") == count * {"": 1, "K": units.KiB, "M": units.MiB,
                                                              "G": units.GiB, "T": units.TiB,
                                                              "P": units.PiB}[suffix]


@pytest.mark.parametrize("text, message", [("4X", "size: '4X' is not a size"), ("0", "size: size must be > 0")])
def test_parse_size_names_the_argument_size_when_given_no_name(text, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        units.parse_size(text)


@pytest.mark.parametrize("text,ns", [
    ("0", 0), ("1", 10 ** 9), ("1.", 10 ** 9), (" 5 ms ", 5 * 10 ** 6), ("0.5us", 500), ("1.5ns", 2),
    ("10s", 10 ** 10), ("10000ms", 10 ** 10), ("10000000000ns", 10 ** 10), ("0.000000001s", 1),
    ("000000000010", 10 ** 10), (3, 3 * 10 ** 9),
])
def test_a_duration_is_nanoseconds_of_its_unit_and_a_bare_number_is_seconds(text, ns):
    assert units.parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "soon", "-1ms", "5 min", "1e3ms", "5MS", "0.0000000001s", "1000000000000ns",
                                  "ms", "1..5s", "1,5s"])
def test_what_is_not_a_duration_is_refused_naming_the_argument(text):
    with pytest.raises(ValueError) as ex:
        units.parse_duration(text, name="--write-delay")
    assert str(ex.value) == f"--write-delay: {text!r} is not a duration (use e.g. 0, 500us, 5ms, 1s)"


@pytest.mark.parametrize("text", ["10.000000001s", "10000000001ns", "11", "100000000000ns"])
def test_a_duration_over_ten_seconds_is_refused_naming_the_argument_and_the_range(text):
    with pytest.raises(ValueError) as ex:
        units.parse_duration(text, name="--write-delay")
    assert str(ex.value) == f"--write-delay: must be in [0, 10s], got {text!r}"
    with pytest.raises(ValueError, match=r"^duration: "):
        units.parse_duration(text)
