"""The architecture diagrams: labels computed from the config, both editions, no overlapping text,
byte-stable SVG."""

import inspect
import re

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from book import diagrams, out, tiny  # noqa: E402
from qwen.deltanet import chunk_gated_delta_rule  # noqa: E402
from qwen.weights import Config  # noqa: E402

NAMES = [
    "diagram_stack",
    "diagram_attention",
    "diagram_deltanet",
    "diagram_chunked",
    "diagram_caches",
]
CJK = re.compile(r"[\u4e00-\u9fff]")
LANGS = {"zh": lambda zh, en: zh, "en": lambda zh, en: en}


@pytest.fixture(scope="module", autouse=True)
def fonts():
    out.setup_fonts()


def texts(name, lang, cfg=None, monkeypatch=None):
    if cfg is not None:
        monkeypatch.setattr(diagrams, "config", lambda: cfg)
    fig = getattr(diagrams, name)(LANGS[lang])
    fig.canvas.draw()
    found = [
        (t.get_text(), t.get_window_extent()) for ax in fig.axes for t in ax.texts if t.get_text()
    ]
    plt.close(fig)
    return found


def test_the_five_diagrams_are_the_ones_the_pages_place():
    assert [d.__name__ for d in diagrams.DIAGRAMS] == NAMES
    for name in NAMES:
        for lang in LANGS:
            assert (diagrams.ROOT / "docs" / "figures" / f"{name}_{lang}.svg").is_file(), (
                f"run `python -m book.regen diagrams` to draw {name}_{lang}.svg"
            )


@pytest.mark.parametrize("name", NAMES)
def test_labels_come_from_the_config(name, monkeypatch):
    """Drawn from another config (the tiny test model's), the shapes on the diagram follow it."""
    cfg = diagrams.config()
    small = Config.load(tiny.path())
    assert (small.hidden_size, small.head_dim) != (cfg.hidden_size, cfg.head_dim)
    official = " ".join(t for t, _ in texts(name, "en"))
    other = " ".join(t for t, _ in texts(name, "en", small, monkeypatch))
    assert official != other
    dims = {
        "diagram_stack": f"[B, T, {cfg.hidden_size:,}]",
        "diagram_attention": f"[B, T, {cfg.num_attention_heads}, {cfg.head_dim}]",
        "diagram_deltanet": f"[B, T, {cfg.linear_num_value_heads}, {cfg.linear_value_head_dim}]",
        "diagram_chunked": f"{cfg.linear_key_head_dim} × {cfg.linear_value_head_dim}",
        "diagram_caches": f"[B, {cfg.num_key_value_heads}, 1, {cfg.head_dim}]",
    }[name]
    assert dims in official and dims not in other


def test_the_official_shapes_are_on_the_diagrams():
    cfg = diagrams.config()
    d, q = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim
    chunk = inspect.signature(chunk_gated_delta_rule).parameters["chunk_size"].default
    conv = (
        2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim
        + cfg.linear_num_value_heads * cfg.linear_value_head_dim
    )
    expect = {
        "diagram_stack": [
            f"embed_tokens   {cfg.vocab_size:,} × {d:,}",
            f"logits [B, T, {cfg.vocab_size:,}]",
            f"layer {len(cfg.layer_types) - 1}\nattention",
        ],
        "diagram_attention": [
            f"q_proj  {d:,} → {2 * q:,}",
            f"o_proj  {q:,} → {d:,}",
            f"RoPE on the first {int(cfg.head_dim * cfg.partial_rotary_factor)} dims",
        ],
        "diagram_deltanet": [
            f"in_proj_qkv  {d:,} → {conv:,}",
            f"kernel {cfg.linear_conv_kernel_dim}",
        ],
        "diagram_chunked": [f"chunks of C = {chunk}", f"chunk 2: tokens {chunk}…{2 * chunk - 1}"],
        "diagram_caches": [f"conv [B, {conv:,}, {cfg.linear_conv_kernel_dim - 1}]"],
    }
    for name, wanted in expect.items():
        shown = "\n".join(t for t, _ in texts(name, "en"))
        for w in wanted:
            assert w in shown, f"{name} lacks {w!r}"
    attention_layers = [
        f"layer {i}\nattention" for i, k in enumerate(cfg.layer_types) if k == "full_attention"
    ]
    shown = [t for t, _ in texts("diagram_stack", "en")]
    assert sum(t in attention_layers for t in shown) == cfg.layer_types.count("full_attention") == 6


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", NAMES)
def test_each_edition_speaks_its_language_and_no_two_labels_overlap(name, lang):
    found = texts(name, lang)
    assert any(CJK.search(t) for t, _ in found) == (lang == "zh")
    clashes = [
        (a, b)
        for i, (a, ea) in enumerate(found)
        for b, eb in found[i + 1 :]
        if ea.shrunk(0.96, 0.9).overlaps(eb.shrunk(0.96, 0.9))
    ]
    assert not clashes, f"{name} ({lang}): overlapping labels {clashes}"


def test_the_svg_is_byte_stable(tmp_path, monkeypatch):
    files = []
    for run in ("a", "b"):
        monkeypatch.setenv("BOOK_OUT", str(tmp_path / run))
        out.save_figure("diagram_caches", diagrams.diagram_caches)
        files.append({p.name: p.read_bytes() for p in (tmp_path / run / "figures").glob("*.svg")})
    assert sorted(files[0]) == ["diagram_caches_en.svg", "diagram_caches_zh.svg"]
    assert files[0] == files[1]
    assert b"<dc:date>" not in files[0]["diagram_caches_en.svg"]
