"""What chapter scripts call to hand numbers and figures to the page (see book/regen.py)."""

import json
import os
from pathlib import Path

LANGS = ("zh", "en")


def _out_dir():
    """$BOOK_OUT when the regeneration runs us; ./out when a reader runs the script by hand."""
    return Path(os.environ.get("BOOK_OUT", "out"))


def record(**values):
    """Numbers the prose quotes, saved next to the printed output so text and output cannot
    disagree."""
    path = _out_dir() / "values.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**old, **values}, ensure_ascii=False, indent=1, sort_keys=True))


def record_error(key, value, below):
    """A rounding-error size (e.g. the largest difference to the reference): recorded and printed as
    `1.2e-07`.

    Its digits depend on the CPU's kernels, so `python -m book.regen --check` only asks that it
    stays below `below`.
    Returns the printed form, for the script's own print().
    """
    value = float(value)
    if not abs(value) < below:
        raise AssertionError(f"{key} = {value:.3g} is not below its bound {below:g}")
    text = f"{value:.1e}"
    path = _out_dir() / "values.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    bounds = {**old.pop("_error_bounds", {}), key: below}
    record(**{key: text, "_error_bounds": bounds})
    return text


def record_measured(key, text, tol=0.0, rel=0.0):
    """A value whose digits depend on the CPU's kernels (computed through bf16 or int8, an argmax
    agreement over near-equal logits): recorded as printed (`text`, e.g. "81.5%"), and
    `python -m book.regen --check` holds it to within max(tol, rel * |value|) of the committed one,
    in its printed unit (percentage points for "81.5%"), never to its last digit. Returns text."""
    if tol <= 0 and rel <= 0:
        raise ValueError(f"{key}: give the tolerance a reader cares about (tol= or rel=)")
    path = _out_dir() / "values.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    tolerances = {**old.pop("_tolerances", {}), key: [tol, rel]}
    record(**{key: text, "_tolerances": tolerances})
    return text


def _numbers(values):
    out = []
    for v in values:
        v = float(v)
        out.append(None if v != v or v in (float("inf"), float("-inf")) else float(f"{v:.7g}"))
    return out


def describe_figure(fig):
    """What a reader sees in a figure, as data: every text, and every plotted number
    (book/compare.py compares it)."""
    import numpy as np

    def texts(ax):
        legend = ax.get_legend()
        return {
            "title": [ax.get_title(loc) for loc in ("left", "center", "right")],
            "xlabel": ax.get_xlabel(),
            "ylabel": ax.get_ylabel(),
            "xticks": [t.get_text() for t in ax.get_xticklabels()],
            "yticks": [t.get_text() for t in ax.get_yticklabels()],
            "texts": [t.get_text() for t in ax.texts],
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
        }

    def data(ax):
        series = [
            _numbers(np.asarray(line.get_xydata(), dtype=float).ravel()) for line in ax.get_lines()
        ]
        for c in ax.collections:
            series.append(_numbers(np.asarray(c.get_offsets(), dtype=float).ravel()))
            arr = c.get_array()
            if arr is not None:
                series.append(_numbers(np.asarray(arr, dtype=float).ravel()))
        for p in ax.patches:
            bbox = p.get_bbox() if hasattr(p, "get_bbox") else None
            if bbox is not None:
                series.append(_numbers([bbox.x0, bbox.y0, bbox.x1, bbox.y1]))
        for im in ax.get_images():
            series.append(_numbers(np.asarray(im.get_array(), dtype=float).ravel()))
        series += [_numbers(ax.get_xlim()), _numbers(ax.get_ylim())]
        return series

    fig.canvas.draw()  # tick labels exist only once drawn
    axes = fig.get_axes()
    suptitle = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    return {
        "texts": {"suptitle": suptitle, "axes": [texts(ax) for ax in axes]},
        "data": [data(ax) for ax in axes],
    }


def save_figure(name, draw):
    """draw(t) builds a figure whose labels come from t("中文", "English"); save it once per edition
    as SVG.

    Beside the SVGs goes `<name>.json`: the figure's texts per edition and its plotted numbers,
    which is what
    `python -m book.regen --check` compares (an SVG's bytes differ in the last digits from one CPU
    to another).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    setup_fonts()
    folder = _out_dir() / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    described = {"texts": {}}
    for lang in LANGS:
        fig = draw(lambda zh, en, lang=lang: zh if lang == "zh" else en)
        fig.savefig(folder / f"{name}_{lang}.svg", metadata={"Date": None}, bbox_inches="tight")
        d = describe_figure(fig)
        described["texts"][lang] = d["texts"]
        described.setdefault("data", d["data"])  # the same numbers in both editions
        plt.close(fig)
    (folder / f"{name}.json").write_text(json.dumps(described, ensure_ascii=False, sort_keys=True))
    if "BOOK_OUT" not in os.environ:
        print(f"(figure saved: {folder / name}_{{zh,en}}.svg)")


def setup_fonts():
    """Matplotlib with a CJK font (from the noto-cjk-sans-otc wheel) and byte-stable SVG output."""
    import matplotlib
    from matplotlib import font_manager

    matplotlib.rcParams["svg.hashsalt"] = "transformer-by-hand"  # stable element ids
    matplotlib.rcParams["axes.unicode_minus"] = False
    try:
        import noto_cjk_sans_otc  # noqa: F401

        font = next(Path(noto_cjk_sans_otc.__file__).parent.rglob("*.tt[cf]"), None)
    except ImportError:
        font = None
    if font is not None:
        font_manager.fontManager.addfont(str(font))
        name = font_manager.FontProperties(fname=str(font)).get_name()
        matplotlib.rcParams["font.sans-serif"] = [name, "DejaVu Sans"]
    matplotlib.rcParams["font.family"] = "sans-serif"
