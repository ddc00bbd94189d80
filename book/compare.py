"""What `python -m book.regen --check` compares: what a reader sees, not the last bits of a float.

Another CPU (or the same CPU with other vector instructions) sums in another order, so floats differ
in their last
bits and an SVG's path coordinates move by 1e-4 px. A reader notices none of that. So an output is
the same when:

- its printed text is the same word for word (the spaces that right-align a column may change with
  the width of the number they pad), every printed integer is the same (counts, sizes,
config arithmetic:
  6 tokens, 752,393,024 parameters), and every other printed number is within one unit of its last
  printed digit
  (a rounding flip of a value computed in fp32: 0.62 and 0.63);
- a value recorded with `book.out.record_measured` (computed through bf16 or int8 kernels, or an
argmax agreement
  over near-equal logits, whose digits depend on the CPU) stays within its stated tolerance of the
  committed one;
- a value recorded with `book.out.record_error` (a rounding-error size, e.g. the largest difference
to the
  reference) stays below its stated bound, whatever its digits;
- a figure has the same texts (title, labels, tick labels, legend) and every plotted number lies
within 0.1% of
  the span of its series (well under a pixel on the page).

Anything else is a difference: another number, another word, a label, a curve that moved.
"""

import math
import re

NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
FIGURE_RTOL = 1e-3


def _parse(token):
    return float(token.replace(",", ""))


def _unit(token):
    """One unit of the last printed digit: 0.62 -> 0.01, 6.3e-05 -> 1e-06, 1,117,326 -> 1."""
    mantissa, _, exponent = token.replace(",", "").lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (int(exponent or 0) - decimals)


def same_number(old, new, bound=None, tolerance=None):
    """Is the printed number `new` the same as `old` to a reader (see the module docstring)?
    bound: an error size that must stay below it; tolerance: (abs, rel) of a kernel-dependent
    value."""
    a, b = _parse(old), _parse(new)
    if bound is not None:  # a rounding-error size: only its bound is meaningful
        return abs(b) < bound
    if tolerance is not None:  # a kernel-dependent value: within its tolerance
        tol, rel = tolerance
        return abs(a - b) <= max(tol, rel * abs(a)) * (1 + 1e-9)
    if not re.search(r"[.eE]", old):  # an integer: a count, a size, exact
        return a == b
    return abs(a - b) <= _unit(old) * (1 + 1e-9)


def printed_number(text):
    """The number in a recorded value as the output prints it: "81.5%" -> "81.5"."""
    m = NUMBER.search(str(text))
    return m.group(0) if m else str(text)


def _split(text):
    """Text and numbers, alternating: ['x ', '6', ' tokens']: even items are words, odd items
    numbers."""
    parts, last = [], 0
    for m in NUMBER.finditer(text):
        parts += [text[last : m.start()], m.group(0)]
        last = m.end()
    return parts + [text[last:]]


def compare_text(old, new, bounds=None, tolerances=None):
    """Differences between two printed outputs, as lines a person can read; [] when they are the
    same."""
    bounds = bounds or {}  # {printed token: bound} of the recorded error sizes
    tolerances = tolerances or {}  # {printed token: (abs, rel)} of kernel-dependent values
    old_lines, new_lines = old.splitlines(), new.splitlines()
    if len(old_lines) != len(new_lines):
        return [f"{len(new_lines)} lines instead of {len(old_lines)}"]
    diffs = []
    for n, (a, b) in enumerate(zip(old_lines, new_lines), 1):
        pa, pb = _split(a), _split(b)
        ok = len(pa) == len(pb) and all(
            x.split() == y.split()  # the same words; a column's padding may follow its number
            if i % 2 == 0
            else same_number(x, y, bounds.get(x), tolerances.get(x))
            for i, (x, y) in enumerate(zip(pa, pb))
        )
        if not ok:
            diffs.append(f"line {n}: {a!r} -> {b!r}")
    return diffs


def compare_values(old, new, bounds=None, tolerances=None):
    """Differences between two recorded value dicts (numbers and strings as printed)."""
    bounds, tolerances = bounds or {}, tolerances or {}
    diffs = []
    for key in sorted(set(old) | set(new)):
        if key not in old or key not in new:
            diffs.append(f"value {key!r}: {'added' if key not in old else 'removed'}")
            continue
        a, b = old[key], new[key]
        if key in bounds:
            if not abs(float(b)) < bounds[key]:
                diffs.append(f"value {key!r}: {b} is not below its bound {bounds[key]:g}")
        elif key in tolerances:
            pa, pb = printed_number(a), printed_number(b)
            if not (NUMBER.fullmatch(pb) and same_number(pa, pb, tolerance=tolerances[key])):
                tol, rel = tolerances[key]
                diffs.append(
                    f"value {key!r}: {a} -> {b}, beyond its tolerance (±{tol:g}, ±{rel:.0%})"
                )
        elif isinstance(a, float) or isinstance(b, float):  # a float kept whole: equal to 1e-5
            if not (
                isinstance(b, (int, float)) and abs(a - b) <= 1e-5 * max(abs(a), abs(b)) + 1e-12
            ):
                diffs.append(f"value {key!r}: {a} -> {b}")
        elif isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
            if not same_number(str(a), str(b)):
                diffs.append(f"value {key!r}: {a} -> {b}")
        elif isinstance(a, str) and isinstance(b, str):
            if compare_text(a, b):
                diffs.append(f"value {key!r}: {a!r} -> {b!r}")
        elif a != b:
            diffs.append(f"value {key!r}: {a!r} -> {b!r}")
    return diffs


def _series_diff(path, a, b):
    if len(a) != len(b):
        return [f"{path}: {len(b)} points instead of {len(a)}"]
    finite = [x for x in a if x is not None and math.isfinite(x)]
    span = (max(finite) - min(finite)) if finite else 0.0
    tol = FIGURE_RTOL * (span or max((abs(x) for x in finite), default=0.0) or 1.0)
    for i, (x, y) in enumerate(zip(a, b)):
        if (x is None) != (y is None) or (
            x is not None and not ((math.isnan(x) and math.isnan(y)) or x == y or abs(x - y) <= tol)
        ):
            return [f"{path}[{i}]: {x} -> {y} (tolerance {tol:.3g}, 0.1% of the series' span)"]
    return []


def compare_figure(old, new, path="figure"):
    """Differences between two figure descriptions made by book.out.describe_figure."""
    if isinstance(old, dict) and isinstance(new, dict):
        if old.keys() != new.keys():
            return [f"{path}: parts {sorted(set(old) ^ set(new))} added or removed"]
        return [d for k in old for d in compare_figure(old[k], new[k], f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list):
        if (
            old
            and all(x is None or isinstance(x, (int, float)) for x in old)
            and all(x is None or isinstance(x, (int, float)) for x in new)
        ):
            return _series_diff(path, old, new)
        if len(old) != len(new):
            return [f"{path}: {len(new)} items instead of {len(old)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(old, new))
            for d in compare_figure(a, b, f"{path}[{i}]")
        ]
    if old != new:
        return [f"{path}: {old!r} -> {new!r}"]
    return []
