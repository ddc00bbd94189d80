"""The parity figures the chapters quote: run tests/test_parity.py and record every difference it
measures.

`python -m book.regen parity` runs this (transformers is needed: it is the reference). Each figure
is the largest |ours - transformers| of one comparison, recorded with its test's tolerance as the
bound: its digits come from the CPU's rounding, so the check asks only that it stays below the
bound.
"""

import contextlib
import io
import math
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from book.out import record, record_error  # noqa: E402
from tests import reference  # noqa: E402
from tests.conftest import PARITY_REPORT_RUNS  # noqa: E402


def key(test, name):
    """'test_model_logits[unequal]', 'model logits (2, 150)' -> 'model_logits_unequal'."""
    param = re.search(r"\[(.*)\]", test)
    words = re.sub(r"\s*\(.*?\)", "", name) + (f" {param.group(1)}" if param else "")
    return re.sub(r"[^a-z0-9]+", "_", words.lower()).strip("_")


def bound(tol):
    """The tolerance as a round number at least as large: 1e-4 stays, a computed 0.213 becomes
    0.3."""
    if tol == 0:
        return 0.0
    unit = 10 ** math.floor(math.log10(tol))
    return math.ceil(tol / unit - 1e-9) * unit


log = io.StringIO()
with contextlib.redirect_stdout(log):
    rc = pytest.main(
        [
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *(str(ROOT / test) for test in PARITY_REPORT_RUNS),
        ]
    )
if rc != 0:
    sys.exit(f"a parity test failed:\n{log.getvalue()[-4000:]}")

worst = {}
for test, name, d, tol in reference.MEASURED:
    k = key(test, name)
    old = worst.get(k)
    shown = re.sub(r"\s*\(transformers' own.*?\)", "", name)
    shown += f" [{test.partition('[')[2].rstrip(']')}]" if "[" in test else ""
    worst[k] = (shown, max(d, old[1] if old else 0.0), bound(tol))
print(f"{'comparison (fp32 unless named)':<62} {'max |diff|':>10}  bound")
for k, (name, d, b) in sorted(worst.items()):
    if b:
        shown = record_error(k, d, b)
    else:  # a bound of 0: the bits must be identical
        assert d == 0, f"{name}: {d} should be exactly 0"
        shown = "0"
        record(**{k: shown})
    print(f"{name:<62} {shown:>10}  {b:g}")
print(f"{len(worst)} comparisons, every one within its bound")
