"""What chapter scripts call to hand numbers and figures to the page (see book/regen.py)."""
import json
import os
from pathlib import Path

LANGS = ("zh", "en")


def _out_dir():
    """$BOOK_OUT when the regeneration runs us; ./out when a reader runs the script by hand."""
    return Path(os.environ.get("BOOK_OUT", "out"))


def record(**values):
    """Numbers the prose quotes, saved next to the printed output so text and output cannot disagree."""
    path = _out_dir() / "values.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**old, **values}, ensure_ascii=False, indent=1, sort_keys=True))


def save_figure(name, draw):
    """draw(t) builds a figure whose labels come from t("中文", "English"); save it once per edition as SVG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    setup_fonts()
    folder = _out_dir() / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    for lang in LANGS:
        fig = draw(lambda zh, en: zh if lang == "zh" else en)
        fig.savefig(folder / f"{name}_{lang}.svg", metadata={"Date": None}, bbox_inches="tight")
        plt.close(fig)
    if "BOOK_OUT" not in os.environ:
        print(f"(figure saved: {folder / name}_{{zh,en}}.svg)")


def setup_fonts():
    """Matplotlib with a CJK font (from the noto-cjk-sans-otc wheel) and byte-stable SVG output."""
    import matplotlib
    from matplotlib import font_manager

    matplotlib.rcParams["svg.hashsalt"] = "transformer-by-hand"     # stable element ids
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
