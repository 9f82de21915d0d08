"""The Relacy model of the atomic variant (csrc/relacy/) uses the memory orders pyb_tracker.c uses.

The model is C++ and models the protocol, not the C file; its orders live in one table (orders.h) that
must name the same operations with the same orders as the MO_* table in pyb_tracker.c, and every named
order must be used in pyb_tracker.c. Running the model itself needs relacy-dev (`make relacy`).
"""

import importlib.util
import pathlib

import pytest

CSRC = pathlib.Path(__file__).resolve().parents[2] / "csrc"


def _checker():
    spec = importlib.util.spec_from_file_location("check_orders", CSRC / "relacy" / "check_orders.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _texts():
    return (CSRC / "pyb_tracker.c").read_text(), (CSRC / "relacy" / "orders.h").read_text()


def test_model_orders_match_the_tracker_source():
    c_text, model_text = _texts()
    code, model = _checker().tables(c_text, model_text)
    assert len(code) >= 15
    assert _checker().differences(c_text, model_text) == []


@pytest.mark.parametrize(
    "edit",
    [
        ("#define MO_CTR_DEC PYB_RELEASE", "#define MO_CTR_DEC PYB_RELAXED"),
        ("#define MO_WORD_LOAD PYB_SEQ_CST", "#define MO_WORD_LOAD PYB_ACQUIRE"),
    ],
)
def test_a_weakened_order_in_the_tracker_is_reported(edit):
    c_text, model_text = _texts()
    assert edit[0] in c_text
    diffs = _checker().differences(c_text.replace(edit[0], edit[1]), model_text)
    name = edit[0].split()[1]
    assert len(diffs) == 1 and diffs[0].startswith(name)


def test_an_order_defined_but_unused_in_the_tracker_is_reported():
    c_text, model_text = _texts()
    c_text += "\n#define MO_EXTRA PYB_RELAXED\n"
    model_text += "\n#define MO_EXTRA rl::mo_relaxed\n"
    assert _checker().differences(c_text, model_text) == ["MO_EXTRA: defined but never used in pyb_tracker.c"]

