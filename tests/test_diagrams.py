"""The architecture diagrams: labels computed from the config, both editions, no overlapping text,
byte-stable SVG."""

import inspect
import re

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from book import diagrams, drawing, out, tiny  # noqa: E402
from qwen.deltanet import chunk_gated_delta_rule  # noqa: E402
from qwen.weights import Config  # noqa: E402

NAMES = [
    "diagram_stack",
    "diagram_attention",
    "diagram_deltanet",
    "diagram_chunked",
    "diagram_caches",
    "diagram_rope",
    "diagram_int8",
    "diagram_tokenizer",
    "diagram_chat",
    "diagram_prefill",
    "diagram_embedding",
    "diagram_loading",
]
# drawn from the config (the others show the tokenizer's work on a string)
FROM_CONFIG = [n for n in NAMES if n not in ("diagram_tokenizer", "diagram_chat")]
CJK = re.compile(r"[\u4e00-\u9fff]")
LANGS = {"zh": lambda zh, en: zh, "en": lambda zh, en: en}


@pytest.fixture(scope="module", autouse=True)
def fonts():
    out.setup_fonts()


def texts(name, lang, cfg=None, monkeypatch=None, where=False):
    if cfg is not None:
        monkeypatch.setattr(drawing, "config", lambda: cfg)
    fig = getattr(diagrams, name)(LANGS[lang])
    fig.canvas.draw()
    found = [
        (t.get_text(), t.get_position() if where else t.get_window_extent())
        for ax in fig.axes
        for t in ax.texts
        if t.get_text()
    ]
    plt.close(fig)
    return found


def test_every_diagram_is_drawn_and_placed_in_both_editions():
    assert [d.__name__ for d in diagrams.DIAGRAMS] == NAMES
    pages = {
        lang: "\n".join(p.read_text() for p in (diagrams.ROOT / "docs" / lang).glob("*.md"))
        for lang in LANGS
    }
    for name in NAMES:
        for lang in LANGS:
            assert (diagrams.ROOT / "docs" / "figures" / f"{name}_{lang}.svg").is_file(), (
                f"run `python -m book.regen diagrams` to draw {name}_{lang}.svg"
            )
            assert re.search(rf'\{{\{{ figure\("{name}"', pages[lang]), (
                f"no page of {lang} shows {name}"
            )


@pytest.mark.parametrize("name", FROM_CONFIG)
def test_labels_come_from_the_config(name, monkeypatch):
    """Drawn from another config (the tiny test model's), the shapes on the diagram follow it."""
    cfg = diagrams.config()
    small = Config.load(tiny.path())
    assert (small.hidden_size, small.head_dim) != (cfg.hidden_size, cfg.head_dim)
    official = " ".join(t for t, _ in texts(name, "en"))
    other = " ".join(t for t, _ in texts(name, "en", small, monkeypatch))
    assert official != other
    rot = int(cfg.head_dim * cfg.partial_rotary_factor)
    H = cfg.linear_num_value_heads
    conv = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + H * cfg.linear_value_head_dim
    dims = {
        "diagram_stack": f"[B, T, {cfg.hidden_size:,}]",
        "diagram_attention": f"[B, T, {cfg.num_attention_heads}, {cfg.head_dim}]",
        "diagram_deltanet": f"[B, T, {cfg.linear_num_value_heads}, {cfg.linear_value_head_dim}]",
        "diagram_chunked": f"{cfg.linear_key_head_dim} × {cfg.linear_value_head_dim}",
        "diagram_caches": f"[B, {cfg.num_key_value_heads}, 1, {cfg.head_dim}]",
        "diagram_rope": f"{cfg.head_dim - rot} dims pass through",
        "diagram_int8": f"{cfg.intermediate_size:,} rows of {cfg.hidden_size:,}",
        "diagram_prefill": f"S [1, {H}, {cfg.linear_key_head_dim}, {cfg.linear_value_head_dim}]",
        "diagram_embedding": f"{cfg.vocab_size:,} × {cfg.hidden_size:,}",
        "diagram_loading": f"view [{conv:,}, {cfg.hidden_size:,}]",
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
            # the state's shape labels the state (beside it), the output arrow keeps o's
            f"S [B, {cfg.linear_num_value_heads}, {cfg.linear_key_head_dim}, "
            f"{cfg.linear_value_head_dim}]",
        ],
        "diagram_chunked": [
            f"chunks of C = {chunk}",
            f"chunk 2: tokens {chunk}…{2 * chunk - 1}",
            # what chunk_gated_delta_rule computes for all chunks at once, and its loop over them
            "all chunks at once (in parallel, batched)",
            "one chunk after another (a loop carrying S)",
        ],
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
    example = diagrams.visible(diagrams.TOKENIZED)  # the tokenizer's example is a mixed string
    words = [t for t, _ in found if t not in example]
    assert any(CJK.search(t) for t in words) == (lang == "zh")
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


def test_partial_rope_is_drawn_to_scale():
    """The rotated part of the head's bar is partial_rotary_factor of its length, split in two
    halves that turn together."""
    cfg = diagrams.config()
    rot = int(cfg.head_dim * cfg.partial_rotary_factor)
    x = {t: pos[0] for t, pos in texts("diagram_rope", "en", where=True)}
    for mark in ("0", str(rot // 2), str(rot), str(cfg.head_dim)):
        assert mark in x, f"no dim index {mark} on the RoPE diagram"
    assert (x[str(rot)] - x["0"]) / (x[str(cfg.head_dim)] - x["0"]) == pytest.approx(
        cfg.partial_rotary_factor
    )
    assert x[str(rot // 2)] - x["0"] == pytest.approx(x[str(rot)] - x[str(rot // 2)])


def test_the_tokenizer_diagram_shows_the_tokenizers_own_steps(tokenizer):
    shown = [t for t, _ in texts("diagram_tokenizer", "en")]
    text = diagrams.TOKENIZED
    ids = tokenizer.encode(text).ids
    assert shown[-len(ids) :] == [str(i) for i in ids]  # the last row: the ids
    pieces = [text[a:b] for _, (a, b) in tokenizer.pre_tokenizer.pre_tokenize_str(text)]
    assert len(pieces) > 1 and "".join(pieces) == text
    for piece in pieces:
        assert diagrams.visible(piece) in shown
        assert piece.encode().hex(" ") in shown
    assert len(ids) > len(pieces)  # a piece that BPE leaves as two tokens is on it


@pytest.mark.parametrize("lang", LANGS)
def test_the_chat_strip_is_the_real_chat_prompt_token_by_token(lang, tokenizer):
    """Its chips, in order, spell chat_prompt (markup, turns, the closed think block), one chip
    per token of chat_ids."""
    from qwen.chat import chat_ids, chat_prompt

    messages = diagrams.chat_messages(LANGS[lang])
    ids = chat_ids(tokenizer, messages)
    shown = [s for s, _ in texts("diagram_chat", lang)][: len(ids)]
    spelled = "".join(s.replace("␣", " ").replace("↵", "\n") for s in shown)
    assert spelled == chat_prompt(messages)
    for tag in ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "system", "user"):
        assert tag in shown
    assert f"{len(ids)} tokens" in " ".join(s for s, _ in texts("diagram_chat", "en"))


def test_int8_shows_each_rows_scale_and_its_largest_weight_at_127():
    import torch

    from qwen.quant import quantize_int8

    shown = [t for t, _ in texts("diagram_int8", "en")]
    ints = [int(t) for t in shown if re.fullmatch(r"-?\d+", t)]
    q = torch.tensor(ints).view(4, 5)
    assert (q.abs().amax(dim=1) == 127).all()  # each row's largest |w| maps to 127
    weights = torch.tensor([float(t) for t in shown if re.fullmatch(r"[+-]0\.\d{3}", t)])
    w = weights.view(4, 5)
    q_again, s = quantize_int8(w)  # the weights are shown to all their (3) decimals
    assert q_again.int().equal(q)
    assert [f"{float(x):.6f}" for x in s] == [t for t in shown if re.fullmatch(r"0\.\d{6}", t)]


def test_the_embedding_diagram_takes_the_rows_of_the_texts_real_ids(tokenizer):
    for lang, text in (("zh", "今天天气不错"), ("en", "The weather is nice")):
        shown = " ".join(t for t, _ in texts("diagram_embedding", lang))
        for i in tokenizer.encode(text).ids:
            assert f" {i}" in shown
