"""Compare the MO_* memory-order table of csrc/pyb_tracker.c with the Relacy model's (orders.h).

Each named operation of the atomic variant's protocol must use the same order in both, and every name
must be used in pyb_tracker.c beyond its definition, so the model cannot drift from the code silently.
Exit 0 when they agree; 1 with one line per difference otherwise. Run by `make relacy`.
"""

import pathlib
import re
import sys

CSRC = pathlib.Path(__file__).resolve().parent.parent
C_DEF = re.compile(r"^#define (MO_[A-Z_]+) PYB_(RELAXED|ACQUIRE|RELEASE|ACQ_REL|SEQ_CST)\b", re.M)
RL_DEF = re.compile(r"^#define (MO_[A-Z_]+) rl::mo_(relaxed|acquire|release|acq_rel|seq_cst)\b", re.M)


def tables(c_text: str, model_text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The two tables as {name: order}; the model's #ifdef mutant branch is skipped (its #else is kept)."""
    model_text = re.sub(r"#ifdef PYB_RELACY_MUTANT.*?#else\n", "", model_text, flags=re.S)
    code = {name: order.lower() for name, order in C_DEF.findall(c_text)}
    model = dict(RL_DEF.findall(model_text))
    return code, model


def differences(c_text: str, model_text: str) -> list[str]:
    code, model = tables(c_text, model_text)
    out = []
    if not code:
        out.append("no MO_* table in pyb_tracker.c")
    for name in sorted(set(code) | set(model)):
        if name not in code:
            out.append(f"{name}: in the model, not in pyb_tracker.c")
        elif name not in model:
            out.append(f"{name}: in pyb_tracker.c, not in the model")
        elif code[name] != model[name]:
            out.append(f"{name}: pyb_tracker.c uses {code[name]}, the model {model[name]}")
        elif len(re.findall(rf"\b{name}\b", c_text)) < 2:
            out.append(f"{name}: defined but never used in pyb_tracker.c")
    return out


def main() -> int:
    c_text = (CSRC / "pyb_tracker.c").read_text()
    model_text = (CSRC / "relacy" / "orders.h").read_text()
    diffs = differences(c_text, model_text)
    for line in diffs:
        print(f"check_orders: {line}", file=sys.stderr)
    if not diffs:
        print(f"check_orders: {len(tables(c_text, model_text)[0])} memory orders agree")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
