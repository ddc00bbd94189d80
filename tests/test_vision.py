"""Stage 5: the image preprocessing, the vision tower, M-RoPE and the model with eyes, each proven
equal to transformers (Qwen2VLImageProcessorPil, Qwen3_5VisionModel, get_rope_index,
Qwen3_5ForConditionalGeneration), and every bad image refused with one clear line."""

import json
import os
import random
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    smart_resize as their_smart_resize,
)
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

from book import tiny
from qwen import vlm
from qwen.image import ImageConfig, Images, open_image, preprocess, smart_resize, to_patches
from qwen.model import Qwen
from qwen.mrope import MRotaryEmbedding, rope_index
from qwen.rope import RotaryEmbedding
from qwen.vision import (
    PatchEmbed,
    VisionConfig,
    VisionModel,
    load_vision_weights,
    patch_rows_cols,
    vision_from_pretrained,
)
from qwen.weights import CheckpointError, Config, load
from tests.reference import max_rel, randomize, tiny_text_config

ROOT = Path(__file__).resolve().parent.parent
OFFICIAL = ROOT / "book" / "data" / "qwen3.5-0.8b"
TOKENS = {"vision_start": 500, "image_pad": 501, "vision_end": 502}
TINY_VISION = {k: v for k, v in tiny.VISION.items() if k != "model_type"}
TOL = 1e-4  # max relative difference, fp32


def photo():
    """Grace Hopper, US Navy photograph (public domain), from matplotlib: 512 wide, 600 tall."""
    from matplotlib import cbook

    return Image.open(cbook.get_sample_data("grace_hopper.jpg")).convert("RGB")


def noise(width, height, mode="RGB", seed=0):
    rng = np.random.default_rng(seed)
    bands = len(Image.new(mode, (1, 1)).getbands())
    shape = (height, width) if bands == 1 else (height, width, bands)
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)


# ------------------------------------------------------------------------------ pixels to patches
def test_smart_resize_equals_transformers_over_random_sizes():
    rng = random.Random(0)
    budgets = [(32, 65536, 16777216), (8, 1024, 16384), (28, 3136, 1003520)]
    for factor, lo, hi in budgets:
        for _ in range(300):
            h, w = rng.randint(factor // 2, 3000), rng.randint(factor // 2, 3000)
            if max(h, w) > 200 * min(h, w):
                continue
            assert smart_resize(h, w, factor, lo, hi) == their_smart_resize(h, w, factor, lo, hi), (
                h,
                w,
                factor,
            )


def test_smart_resize_refuses_an_extreme_aspect_ratio():
    with pytest.raises(ValueError, match="200 times longer"):
        smart_resize(10, 2500)


def processor(cfg):
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": cfg.min_pixels, "longest_edge": cfg.max_pixels},
        patch_size=cfg.patch_size,
        temporal_patch_size=cfg.temporal_patch_size,
        merge_size=cfg.merge_size,
        image_mean=list(cfg.image_mean),
        image_std=list(cfg.image_std),
    )


OFFICIAL_CFG = ImageConfig.load(OFFICIAL)
TINY_CFG = ImageConfig(
    **{**ImageConfig().__dict__, "min_pixels": 32 * 32, "max_pixels": 128 * 128, "patch_size": 4}
)
SMALL_CFG = ImageConfig(**{**TINY_CFG.__dict__, "max_pixels": 48 * 48})  # the photo is above it
CASES = {
    "photograph 512x600, official budget": (photo, OFFICIAL_CFG),
    "photograph 512x600, above the maximum": (photo, SMALL_CFG),
    "tall 40x300": (lambda: noise(40, 300), TINY_CFG),
    "wide 333x41": (lambda: noise(333, 41), TINY_CFG),
    "tiny 9x13, below the minimum": (lambda: noise(9, 13), TINY_CFG),
    "tiny 40x30, below the official minimum": (lambda: noise(40, 30), OFFICIAL_CFG),
    "large 170x130, above the maximum": (lambda: noise(170, 130), TINY_CFG),
    "gray": (lambda: noise(50, 70, "L"), TINY_CFG),
    "RGBA": (lambda: noise(60, 44, "RGBA"), TINY_CFG),
    "CMYK": (lambda: noise(60, 44, "CMYK"), TINY_CFG),
}


@pytest.mark.parametrize("case", CASES)
def test_preprocess_equals_the_image_processor(case, tmp_path):
    make, cfg = CASES[case]
    image = make()
    file = tmp_path / ("x.jpg" if image.mode == "CMYK" else "x.png")
    image.save(file)  # through a file, as a reader gives it
    ours = preprocess([open_image(file)], cfg)
    theirs = processor(cfg)(images=[Image.open(file)], return_tensors="pt")
    assert ours.grid.tolist() == theirs["image_grid_thw"].tolist(), case
    assert ours.pixels.shape == theirs["pixel_values"].shape
    d = (ours.pixels - theirs["pixel_values"]).abs().max().item()
    print(f"{case}: grid {ours.grid.tolist()}, max |diff| {d:.1e}")
    assert d < 1e-5, case


def test_patches_are_in_the_mergers_order_not_row_order():
    cfg = ImageConfig(patch_size=1, temporal_patch_size=1, merge_size=2)
    pixels = torch.arange(16.0).view(1, 4, 4).expand(3, 4, 4)  # one number per pixel = patch
    rows, grid = to_patches(pixels, cfg)
    assert grid == (1, 4, 4)
    # the first 2 x 2 block (0, 1, 4, 5), then the one to its right (2, 3, 6, 7), ...
    assert rows[:, 0].tolist() == [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]


def test_two_images_make_one_batch_with_two_grids():
    images = preprocess([noise(40, 64), noise(72, 32, seed=1)], TINY_CFG)
    assert images.grid.tolist() == [[1, 16, 10], [1, 8, 18]]  # 64 x 40 and 32 x 72 px
    assert images.pixels.shape[0] == int(images.grid.prod(-1).sum())
    assert images.tokens() == [t * h * w // 4 for t, h, w in images.grid.tolist()]


# ------------------------------------------------------------------------------ bad images
def bad_files(d):
    d = Path(d)
    (d / "empty.png").write_bytes(b"")
    (d / "notes.png").write_text("not an image at all\n")
    buf = d / "good.png"
    noise(64, 64).save(buf)
    (d / "truncated.png").write_bytes(buf.read_bytes()[:200])
    frames = [noise(16, 16, seed=s) for s in range(3)]
    frames[0].save(d / "animated.gif", save_all=True, append_images=frames[1:])
    Image.new("L", (8000, 6300)).save(d / "huge.png")  # 50.4 megapixels
    (d / "folder").mkdir()
    return {
        "missing.png": "no such file",
        "folder": "a folder",
        "empty.png": "is empty",
        "notes.png": "not an image PIL can read",
        "truncated.png": "not an image PIL can read",
        "animated.gif": "animated",
        "huge.png": "megapixels",
    }


def test_bad_images_are_refused_with_one_line(tmp_path):
    for name, says in bad_files(tmp_path).items():
        with pytest.raises(ValueError) as e:
            open_image(tmp_path / name)
        assert says in str(e.value) and "\n" not in str(e.value), (name, str(e.value))


def test_gray_rgba_and_cmyk_become_rgb_and_transparency_lies_over_white(tmp_path):
    for mode in ("L", "RGBA", "CMYK", "P", "LA"):
        file = tmp_path / f"x_{mode}.{'jpg' if mode == 'CMYK' else 'png'}"
        noise(20, 20, "L" if mode in ("P", "LA") else mode).convert(mode).save(file)
        assert open_image(file).mode == "RGB", mode
    clear = Image.new("RGBA", (8, 8), (0, 0, 0, 0))
    clear.save(tmp_path / "clear.png")
    assert np.asarray(open_image(tmp_path / "clear.png")).min() == 255


def test_a_bad_preprocessor_config_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="preprocessor_config.json is missing"):
        ImageConfig.load(tmp_path)
    for bad, says in (
        ({"patch_size": 0}, "patch_size"),
        ({"size": {"shortest_edge": 9, "longest_edge": 4}}, "shortest_edge"),
        ({"image_std": [0.5, 0, 0.5]}, "image_std"),
        ({"image_mean": [0.5]}, "image_mean"),
    ):
        (tmp_path / "preprocessor_config.json").write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=says):
            ImageConfig.load(tmp_path)


# ------------------------------------------------------------------------------ the vision tower
@torch.no_grad()
def randomize_visual(visual, seed=0):
    """Every parameter random: norms near 1, biases small, matrices at a gain that keeps fp32
    rounding visible but bounded."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in visual.named_parameters():
        if "norm" in name and name.endswith("weight"):
            p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
        elif name.endswith("bias"):
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        elif name.endswith("pos_embed.weight"):
            p.copy_(torch.randn(p.shape, generator=gen))
        else:
            p.copy_(0.8 * torch.randn(p.shape, generator=gen) * p[0].numel() ** -0.5)
    return visual


def vision_pair(config, seed=0):
    """transformers' Qwen3_5VisionModel with random weights, and ours with the same weights."""
    hf = Qwen3_5Config(text_config=tiny_text_config().to_dict(), vision_config=config)
    torch.manual_seed(seed)
    ref = randomize_visual(Qwen3_5VisionModel(hf.vision_config).eval(), seed)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(hf.to_dict()))
        ours = load(VisionModel(VisionConfig.load(d)), dict(ref.state_dict()))
    return ref, ours


def image_batch(sizes, cfg):
    return preprocess([noise(w, h, seed=i) for i, (w, h) in enumerate(sizes)], cfg)


@pytest.fixture(scope="module")
def tiny_pair():
    return vision_pair(TINY_VISION)


@pytest.mark.parametrize(
    "sizes",
    [[(40, 56)], [(72, 32)], [(40, 56), (72, 32)]],
    ids=["one image", "another", "two images"],
)
@torch.no_grad()
def test_vision_tower_equals_transformers_tiny(tiny_pair, sizes):
    ref, ours = tiny_pair
    x = image_batch(sizes, TINY_CFG)
    max_rel(
        f"vision tower, tiny config, {len(sizes)} image(s)",
        ours(x.pixels, x.grid),
        ref(x.pixels, grid_thw=x.grid).pooler_output,
        TOL,
    )


@torch.no_grad()
def test_vision_tower_equals_transformers_at_the_08b_shapes():
    config = json.loads((OFFICIAL / "config.json").read_text())["vision_config"]
    ref, ours = vision_pair(config)
    for sizes in ([(256, 320)], [(256, 320), (300, 200)]):
        x = image_batch(sizes, OFFICIAL_CFG)
        max_rel(
            f"vision tower, 0.8B shapes, {len(sizes)} image(s) {x.grid.tolist()}",
            ours(x.pixels, x.grid),
            ref(x.pixels, grid_thw=x.grid).pooler_output,
            TOL,
        )


@torch.no_grad()
def test_two_images_in_one_batch_do_not_see_each_other(tiny_pair):
    _, ours = tiny_pair
    a, b = image_batch([(40, 56)], TINY_CFG), image_batch([(72, 32)], TINY_CFG)
    both = Images(torch.cat([a.pixels, b.pixels]), torch.cat([a.grid, b.grid]))
    out = ours(both.pixels, both.grid)
    alone = torch.cat([ours(a.pixels, a.grid), ours(b.pixels, b.grid)])
    assert torch.allclose(out, alone, atol=1e-6, rtol=1e-5)
    # attention over all the patches at once would mix the images: the check above can fail
    attn, n = ours.blocks[0].attn, len(both.pixels)
    x = torch.randn(n, ours.cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    cos, sin = ours.rotary(*patch_rows_cols(both.grid))
    one = attn(x, cos, sin, [n])
    two = attn(x, cos, sin, [len(a.pixels), len(b.pixels)])
    assert not torch.allclose(one, two)


def test_vision_gradients_equal_transformers(tiny_pair):
    ref, ours = tiny_pair
    ours.requires_grad_(True)
    try:
        x = image_batch([(40, 56), (72, 32)], TINY_CFG)
        weight = torch.randn(
            ref(x.pixels, grid_thw=x.grid).pooler_output.shape,
            generator=torch.Generator().manual_seed(1),
        )
        (ref(x.pixels, grid_thw=x.grid).pooler_output * weight).sum().backward()
        (ours(x.pixels, x.grid) * weight).sum().backward()
        theirs = dict(ref.named_parameters())
        worst = max(
            (
                (
                    name,
                    (
                        (p.grad - theirs[name].grad).abs().max() / theirs[name].grad.abs().max()
                    ).item(),
                )
                for name, p in ours.named_parameters()
            ),
            key=lambda kv: kv[1],
        )
        assert all(p.grad is not None for p in ours.parameters())
        max_rel(
            # the worst parameter's name depends on the CPU's kernels: its count is printed
            f"vision gradients, worst of {len(theirs)} parameters",
            ours.get_parameter(worst[0]).grad,
            theirs[worst[0]].grad,
            TOL,
        )
    finally:
        ours.requires_grad_(False)
        ref.zero_grad()


@torch.no_grad()
def test_patch_embed_matmul_equals_the_conv3d():
    cfg = VisionConfig.load(tiny.path())
    embed = PatchEmbed(cfg)
    x = torch.randn(10, 3 * 2 * 4 * 4)
    conv = embed.proj(x.view(10, 3, 2, 4, 4)).view(10, -1)
    assert torch.allclose(embed(x), conv, atol=1e-6)


# ------------------------------------------------------------------------------ loading
def test_the_tiny_models_vision_tower_loads_with_the_loaders_checks():
    visual = vision_from_pretrained(tiny.path())
    assert visual.cfg.depth == 2 and visual.cfg.out_hidden_size == 64
    assert not any(p.requires_grad for p in visual.parameters())


def checkpoint_copy(src, dest, change):
    for f in src.iterdir():
        if f.is_file() and f.name != tiny.MANIFEST:
            shutil.copy(f, dest / f.name)
    file = dest / tiny.WEIGHTS_FILE
    W = load_file(file)
    change(W)
    save_file(W, file, metadata={"format": "pt"})
    index = dest / "model.safetensors.index.json"  # the index matches: the loader's
    raw = json.loads(index.read_text())  # own checks must find the damage
    raw["weight_map"] = {k: tiny.WEIGHTS_FILE for k in sorted(W)}
    index.write_text(json.dumps(raw))
    return dest


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda W: W.pop("model.visual.blocks.1.mlp.linear_fc2.bias"),
            "missing from the checkpoint: model.visual.blocks.1.mlp.linear_fc2.bias",
        ),
        (
            lambda W: W.update({"model.visual.blocks.2.norm1.weight": torch.ones(32)}),
            "not used by VisionModel: model.visual.blocks.2.norm1.weight",
        ),
        (
            lambda W: W.update({"model.visual.merger.linear_fc2.weight": torch.ones(64, 64)}),
            "shape of model.visual.merger.linear_fc2.weight",
        ),
        (
            lambda W: W.update(
                {"model.visual.pos_embed.weight": torch.zeros(64, 32, dtype=torch.int32)}
            ),
            "reads BF16, F16, F32 only",
        ),
        (
            lambda W: W["model.visual.blocks.0.attn.qkv.weight"].view(-1)[5].fill_(float("nan")),
            "model.visual.blocks.0.attn.qkv.weight",
        ),
    ],
    ids=["missing", "extra", "shape", "dtype", "nan"],
)
def test_a_damaged_vision_checkpoint_is_refused(tmp_path, change, says):
    path = checkpoint_copy(tiny.path(), tmp_path, change)
    with pytest.raises((ValueError, CheckpointError)) as e:
        vision_from_pretrained(path)
    assert says in str(e.value)


def test_a_text_only_checkpoint_says_it_cannot_see(tmp_path):
    path = checkpoint_copy(
        tiny.path(),
        tmp_path,
        lambda W: [W.pop(k) for k in list(W) if k.startswith("model.visual.")],
    )
    with pytest.raises(CheckpointError, match="no model.visual"):
        load_vision_weights(path)
    raw = json.loads((path / "config.json").read_text())
    raw.pop("vision_config")
    (path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="text-only checkpoint"):
        VisionConfig.load(path)


# ------------------------------------------------------------------------------ M-RoPE
def test_mrope_with_equal_axes_is_chapter_4s_rope_bit_for_bit():
    cfg = Config.load(tiny.path())
    rope = RotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)
    mrope = MRotaryEmbedding(
        cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta, vlm.mrope_sections(tiny.path())
    )
    positions = torch.arange(300)
    for a, b in zip(rope(positions), mrope(positions.expand(3, 1, -1))):
        assert torch.equal(a, b[0])


def test_mrope_sections_must_cover_the_frequencies():
    with pytest.raises(ValueError, match="sums to"):
        MRotaryEmbedding(256, 0.25, 1e7, [11, 11, 11])


def test_the_08b_frequencies_are_interleaved():
    axis = MRotaryEmbedding(256, 0.25, 1e7, [11, 11, 10]).axis.tolist()
    assert axis[:6] == [0, 1, 2, 0, 1, 2] and axis[-2:] == [0, 1]
    assert [axis.count(a) for a in range(3)] == [11, 11, 10]


@pytest.fixture(scope="module")
def vl_pair():
    """transformers' Qwen3_5ForConditionalGeneration (tiny text + tiny vision, random) and our
    QwenVL with its weights."""
    hf = Qwen3_5Config(
        text_config=tiny_text_config().to_dict(),
        vision_config=TINY_VISION,
        tie_word_embeddings=True,
        image_token_id=501,
        vision_start_token_id=500,
        vision_end_token_id=502,
        video_token_id=503,
    )
    torch.manual_seed(0)
    ref = Qwen3_5ForConditionalGeneration(hf).eval()
    randomize(ref.model.language_model)
    randomize_visual(ref.model.visual)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(hf.to_dict()))
        sd = ref.state_dict()
        text = load(
            Qwen(Config.load(d)),
            {
                k.removeprefix("model.language_model."): v
                for k, v in sd.items()
                if k.startswith("model.language_model.")
            },
        )
        visual = load(VisionModel(VisionConfig.load(d)), sd, "model.visual.")
        ours = vlm.QwenVL(
            text.requires_grad_(False),
            visual.requires_grad_(False),
            vlm.vision_tokens(d),
            vlm.mrope_sections(d),
        )
    return ref, ours


def prompt(images, before=5, between=3, after=4, seed=0):
    """Text, then each image's tokens with text between, then text: ids [1, T]."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 500, (before,), generator=gen).tolist()
    for i, n in enumerate(images.tokens()):
        ids += vlm.image_ids(TOKENS, n)
        ids += torch.randint(
            0, 500, (between if i < len(images.tokens()) - 1 else after,), generator=gen
        ).tolist()
    return torch.tensor([ids])


def token_types(ids):
    return (ids == TOKENS["image_pad"]).int()


@pytest.mark.parametrize(
    "sizes",
    [[(40, 56)], [(40, 56), (72, 32)], [(64, 16), (16, 64)]],
    ids=["one image", "two images", "tall and wide"],
)
def test_rope_index_equals_get_rope_index(vl_pair, sizes):
    ref, _ = vl_pair
    x = image_batch(sizes, TINY_CFG)
    ids = prompt(x)
    ours, deltas = rope_index(ids, x.grid, TOKENS["image_pad"])
    theirs, their_deltas = ref.model.get_rope_index(ids, token_types(ids), image_grid_thw=x.grid)
    assert torch.equal(ours, theirs)
    assert deltas == their_deltas.flatten().tolist()


def test_rope_index_refuses_a_prompt_that_does_not_match_its_images():
    x = image_batch([(40, 56)], TINY_CFG)
    ids = prompt(x)
    with pytest.raises(ValueError, match="more image tokens than there are images"):
        rope_index(ids, x.grid[:0], TOKENS["image_pad"])
    with pytest.raises(ValueError, match="more images than runs"):
        rope_index(ids, torch.cat([x.grid, x.grid]), TOKENS["image_pad"])
    short = torch.tensor([[1, 500, *[501] * 3, 502, 7]])
    with pytest.raises(ValueError, match="image tokens in a row"):
        rope_index(short, x.grid, TOKENS["image_pad"])


@pytest.mark.parametrize(
    "sizes", [[(40, 56)], [(40, 56), (72, 32)]], ids=["one image", "two images"]
)
@torch.no_grad()
def test_logits_with_images_equal_transformers(vl_pair, sizes):
    ref, ours = vl_pair
    x = image_batch(sizes, TINY_CFG)
    ids = prompt(x)
    theirs = ref(
        input_ids=ids,
        pixel_values=x.pixels,
        image_grid_thw=x.grid,
        mm_token_type_ids=token_types(ids),
    ).logits
    max_rel(f"logits with {len(sizes)} image(s)", ours(ids, images=x), theirs, TOL)


@torch.no_grad()
def test_greedy_generation_with_two_images_equals_transformers(vl_pair):
    from qwen.generate import generate

    ref, ours = vl_pair
    x = image_batch([(40, 56), (72, 32)], TINY_CFG)
    ids = prompt(x)
    theirs = ref.generate(
        input_ids=ids,
        pixel_values=x.pixels,
        image_grid_thw=x.grid,
        mm_token_type_ids=token_types(ids),
        max_new_tokens=40,
        do_sample=False,
        min_new_tokens=40,
    )[0, ids.shape[1] :].tolist()
    mine = list(
        generate(vlm.WithImages(ours, x), ids[0].tolist(), max_new_tokens=40, temperature=0)
    )
    assert mine == theirs


@torch.no_grad()
def test_text_only_prompts_give_chapter_9s_logits_exactly(vl_pair):
    _, ours = vl_pair
    ids = torch.randint(0, 500, (2, 17), generator=torch.Generator().manual_seed(3))
    assert torch.equal(ours(ids), ours.text(ids))


@torch.no_grad()
def test_decode_steps_through_the_cache_equal_the_whole_prompt(vl_pair):
    _, ours = vl_pair
    x = image_batch([(40, 56)], TINY_CFG)
    ids = prompt(x, after=6)
    whole = ours(ids, images=x)
    cache = ours.new_cache()
    first = ours(ids[:, :-3], cache, images=x)
    steps = [ours(ids[:, i : i + 1], cache) for i in range(ids.shape[1] - 3, ids.shape[1])]
    max_rel(
        "prompt + 3 decode steps vs the whole prompt", torch.cat([first, *steps], 1), whole, TOL
    )


def test_the_prompt_must_match_its_images(vl_pair):
    _, ours = vl_pair
    x = image_batch([(40, 56)], TINY_CFG)
    ids = prompt(x)
    with pytest.raises(ValueError, match="no images were given"):
        ours(ids)
    with pytest.raises(ValueError, match="image tokens"):
        ours(ids[:, :-8], images=x)


def test_the_tiny_model_answers_about_an_image(tmp_path):
    from tokenizers import Tokenizer

    from qwen.generate import generate
    from qwen.weights import load_weights

    path = tiny.path()
    text = load(Qwen(Config.load(path)), load_weights(path, dtype=torch.float32))
    model = vlm.from_pretrained(path, text.requires_grad_(False))
    photo().save(tmp_path / "hopper.jpg")
    images = vlm.read_images([tmp_path / "hopper.jpg"], path)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    chat = vlm.ImageChat()
    chat.ask("Describe this picture.", images.tokens())
    ids = chat.ids(tok, vlm.vision_tokens(path))
    assert ids.count(vlm.vision_tokens(path)["image_pad"]) == images.tokens()[0] > 0
    with torch.no_grad():
        out = list(generate(vlm.WithImages(model, images), ids, max_new_tokens=5, temperature=0))
    assert len(out) == 5


def test_bench_vision_smoke():
    """scripts/bench_vision.py end to end on the tiny model's shapes: both dtypes of the tower and
    of the image prompt's prefill are timed and reported, with the verdict; a smoke run is never
    written to the book."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = [sys.executable, "scripts/bench_vision.py", "--smoke"]
    proc = subprocess.run(run, cwd=root, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tower ms" in proc.stdout and "prefill ms" in proc.stdout
    verdict = r"the faster prefill on this CPU at the largest size: (fp32|bf16)"
    assert re.search(verdict, proc.stdout)
    proc = subprocess.run(run + ["--write"], cwd=root, capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "not written" in proc.stderr
