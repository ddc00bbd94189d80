"""The diagrams' drawing kit: boxes, shapes, notes, arrows on a canvas in drawing units, the
colours of each kind of part, and the official config every shape is computed from."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch  # noqa: E402

from qwen.weights import Config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "book" / "data" / "qwen3.5-0.8b"
INCH = 0.42  # inches per drawing unit
COLORS = {
    "deltanet": "#d6e6f5",
    "attention": "#fbe0c3",
    "norm": "#ececec",
    "mlp": "#dcefd6",
    "state": "#e6dcf3",
    "io": "#ffffff",
    "gate": "#f8d7da",
}
EDGE, SHAPE = "#444444", "#1f4e79"


def config():
    return Config.load(CONFIG)


def sans():
    """The CJK font, then DejaVu for the symbols it lacks (ᵀ, ⌊⌋, subscripts): a list, so each glyph
    falls back."""
    return [*matplotlib.rcParams["font.sans-serif"][:1], "DejaVu Sans"]


def n(x):
    """1024 -> '1,024'."""
    return f"{x:,}"


# -------------------------------------------------------------------------------------- drawing kit
def canvas(width, height):
    fig = plt.figure(figsize=(width * INCH, height * INCH))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def box(ax, x, y, w, h, text, kind="io", size=9):
    """A rounded box centred at (x, y)."""
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=0.15",
            facecolor=COLORS[kind],
            edgecolor=EDGE,
            linewidth=0.9,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=size, linespacing=1.3, family=sans())


def shape(ax, x, y, text, ha="center", size=8, color=SHAPE):
    """A tensor shape, in the colour used for shapes throughout."""
    ax.text(
        x,
        y,
        text,
        ha=ha,
        va="center",
        fontsize=size,
        color=color,
        family=["DejaVu Sans Mono", *sans()],
    )


def note(ax, x, y, text, ha="center", size=8.5, color="#333333", **kw):
    ax.text(
        x,
        y,
        text,
        ha=ha,
        va="center",
        fontsize=size,
        color=color,
        linespacing=1.3,
        family=sans(),
        **kw,
    )


def math(ax, x, y, formula, ha="center", size=8.5):
    """A formula in matplotlib's mathtext (no CJK inside: words go in a separate note)."""
    ax.text(x, y, formula, ha=ha, va="center", fontsize=size)


def arrow(ax, a, b, color=EDGE, style="-|>", lw=1.0, ls="-", rad=0.0):
    ax.add_patch(
        FancyArrowPatch(
            a,
            b,
            arrowstyle=style,
            mutation_scale=10,
            color=color,
            linewidth=lw,
            linestyle=ls,
            shrinkA=0,
            shrinkB=0,
            connectionstyle=f"arc3,rad={rad}",
        )
    )


def line(ax, xs, ys, color=EDGE, lw=1.0, ls="-"):
    ax.plot(xs, ys, color=color, linewidth=lw, linestyle=ls, solid_capstyle="butt")


def op(ax, x, y, symbol, r=0.28):
    """A circled operator (+ or ×) at (x, y)."""
    ax.add_patch(Circle((x, y), r, facecolor="white", edgecolor=EDGE, linewidth=0.9))
    ax.text(x, y, symbol, ha="center", va="center", fontsize=10, family=sans())


# ------------------------------------------------------------------------------------- the diagrams


# the narrow diagrams (phones): 13 units wide (5.5 in): at a phone's 358 px a 10 pt label renders
# near 9 px
BIG, MONO = 10, 9.5
