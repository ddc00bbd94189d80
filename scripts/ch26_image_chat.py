"""Chapter 26: talking about an image. The tower's rows take the places of the image tokens."""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from matplotlib import cbook
from tokenizers import Tokenizer

from book.out import record, record_error, save_figure
from qwen import vlm
from qwen.generate import generate
from qwen.image import ImageConfig, smart_resize
from qwen.model import from_pretrained
from qwen.vision import VisionConfig, VisionModel
from qwen.weights import find_model

path = find_model()
ROOT = Path(__file__).resolve().parent.parent
OFFICIAL = ROOT / "book" / "data" / "qwen3.5-0.8b"  # the official config files, no weights
PHOTO = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
QUESTION = "What is in this picture?"
torch.manual_seed(0)

# the model with eyes: chapter 9's text model and chapter 24's tower
model = vlm.from_pretrained(path, from_pretrained(path))
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
n_text, n_visual = (sum(p.numel() for p in m.parameters()) for m in (model.text, model.visual))
print(f"QwenVL: text model {n_text:,} + vision tower {n_visual:,} parameters; "
      f"vision tokens {model.tokens}")

# the prompt: one image with the question, in the chat template
images = vlm.read_images([PHOTO], path)
chat = vlm.ImageChat()
chat.ask(QUESTION, images.tokens())
ids = chat.ids(tok, model.tokens)
pad = model.tokens["image_pad"]
shown = re.sub(r"(<\|image_pad\|>)+", lambda m: f"<|image_pad|>×{m.group(0).count('pad')}",
               tok.decode(ids, skip_special_tokens=False))
print(f"photograph -> grid {images.grid.tolist()[0]} -> {images.tokens()[0]} tokens; "
      f"the prompt, {len(ids)} tokens:")
print("  " + shown.replace("\n", "\n  "))
n_pad = ids.count(pad)
print(f"<|image_pad|> in the prompt: {n_pad}, the image makes {images.tokens()[0]}")

# place: the tower's rows go where the pads are, in order
with torch.no_grad():
    x = model.embed_tokens(torch.tensor([ids]))                     # [1, T, dim]
    features = model.see(images)                                    # [tokens, dim]
    placed = vlm.place(x, torch.tensor([ids]) == pad, features)
where = [i for i, t in enumerate(ids) if t == pad]
print(f"features {tuple(features.shape)} placed at positions {where[0]}..{where[-1]}: "
      f"rows equal {torch.equal(placed[0, where], features)}, "
      f"the text rows unchanged {torch.equal(placed[0, :where[0]], x[0, :where[0]])}, "
      f"the input unchanged {not torch.equal(x[0, where], features)}")
try:
    short = ids[:where[0]] + ids[where[0] + 1:]                     # one pad fewer
    model(torch.tensor([short]), images=images)
except ValueError as e:
    print(f"a prompt with one pad fewer: {e}")

# generation through the caches: the image is seen once, at the prefill
with torch.no_grad():
    answer = list(generate(vlm.WithImages(model, images), ids, 8, presence_penalty=1.5))
    cache = model.new_cache()
    model(torch.tensor([ids]), cache, last_only=True, images=images)
    delta = cache.rope_deltas[0]
    step = model(torch.tensor([[answer[0]]]), cache, last_only=True)   # a text step
    whole = model(torch.tensor([ids + answer[:1]]), images=images)[:, -1:]
print(f"greedy (main.py's presence penalty 1.5), 8 tokens: {tok.decode(answer)!r}")
print(f"M-RoPE after the prompt: rope_deltas {delta}; the first answer token's position "
      f"{len(ids) + delta} (its index {len(ids)} {'-' if delta < 0 else '+'} {abs(delta)}), "
      "the same on all 3 axes")
diff = record_error("decode_diff", (step - whole).abs().max().item(), 1e-4)
print(f"a decode step through the cache vs the whole prompt again: max |diff| {diff}")
record(params_text=f"{n_text:,}", params_visual=f"{n_visual:,}", photo_tokens=n_pad,
       prompt_tokens=len(ids), pad_first=where[0], pad_last=where[-1], rope_delta=delta,
       first_position=len(ids) + delta)

# scripts/main.py --image, as a reader runs it (greedy: the same words every time)
photo = Path(tempfile.mkdtemp()) / "hopper.jpg"
photo.write_bytes(Path(PHOTO).read_bytes())
env = {**os.environ, "PYTHONPATH": str(ROOT)}


def main_py(*args):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "main.py"), *args],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    speeds = re.sub(r"[\d.]+ tok/s", "… tok/s", r.stderr.strip())   # timings change per run
    return r.returncode, r.stdout.strip(), speeds


command = ["--tiny", "--image", "hopper.jpg", "--prompt", QUESTION, "--temperature", "0",
           "--max-new-tokens", "8"]
rc, out, err = main_py(*[str(photo) if a == "hopper.jpg" else a for a in command])
print(f"\n$ python scripts/main.py {' '.join(repr(a) if ' ' in a else a for a in command)}")
print(out)
print(err)
print(f"(exit status {rc})")
folder = photo.parent
(folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
text_only = folder / "text-model"                                    # the tiny model, no eyes
text_only.mkdir()
for f in path.iterdir():
    (text_only / f.name).symlink_to(f)
raw = json.loads((path / "config.json").read_text())
raw.pop("vision_config")
(text_only / "config.json").unlink()
(text_only / "config.json").write_text(json.dumps(raw))
for label, args in [("a missing file", ["--tiny", "--image", str(folder / "missing.jpg")]),
                    ("a corrupt file", ["--tiny", "--image", str(folder / "broken.jpg")]),
                    ("a text-only checkpoint",
                     ["--model", str(text_only), "--image", str(photo)])]:
    rc, out, err = main_py(*args, "--prompt", "hi")
    print(f"{label}: exit {rc}, {len(err.splitlines())} line: "
          + err.replace(str(folder), "/tmp/x"))

# what an image costs under the official budget: tokens of the text
ocfg = ImageConfig.load(OFFICIAL)
SIZES = [("256 x 256", 256, 256), ("512 x 512", 512, 512), ("1024 x 1024", 1024, 1024),
         ("full HD", 1920, 1080), ("12 MP photo", 4000, 3000), ("tall strip", 300, 2000),
         ("wide banner", 3000, 200)]                                # (name, width, height)


def cost(w, h):
    """(resized width, height, patches, tokens) of a w x h image under the official budget."""
    rh, rw = smart_resize(h, w, ocfg.factor, ocfg.min_pixels, ocfg.max_pixels)
    patches = (rh // ocfg.patch_size) * (rw // ocfg.patch_size)
    return rw, rh, patches, patches // ocfg.merge_size**2


template = len(vlm.image_chat_ids(tok, [{"role": "user", "content": QUESTION, "images": [0]}],
                                  model.tokens))                   # the prompt around the pads
print(f"\ntokens per image, official preprocessor_config.json (the prompt adds {template}):")
print(f"  {'image':12} {'width x height':>15} {'resized':>13} {'MP':>6} {'patches':>8} "
      f"{'tokens':>7} {'prefill':>8}")
for name, w, h in SIZES:
    rw, rh, patches, n = cost(w, h)
    print(f"  {name:12} {f'{w} x {h}':>15} {f'{rw} x {rh}':>13} {w * h / 1e6:6.2f} "
          f"{patches:>8,} {n:>7,} {n + template:>8,}")
    key = f"{w}x{h}"
    record(**{f"tokens_{key}": f"{n:,}", f"resized_{key}": f"{rw} × {rh}",
              f"prefill_{key}": f"{n + template:,}", f"patches_{key}": f"{patches:,}"})
lowest, highest = (p // (ocfg.patch_size * ocfg.merge_size) ** 2 for p in (ocfg.min_pixels,
                                                                           ocfg.max_pixels))
record(template_tokens=template, min_tokens=f"{lowest:,}", max_tokens=f"{highest:,}",
       patch_size=ImageConfig.load(path).patch_size)

# the tower at the 0.8B shapes: what it holds in memory (its time: scripts/bench_vision.py)
vcfg = VisionConfig.load(OFFICIAL)
n_tower = sum(p.numel() for p in VisionModel(vcfg).parameters())
print(f"\nthe vision tower at the 0.8B shapes: {n_tower:,} parameters, "
      f"{4 * n_tower / 1e6:.0f} MB in fp32, {2 * n_tower / 1e6:.0f} MB in bf16")
head = "one layer's scores, fp32 MB"
print(f"  {'image':10} {'patches':>8} {'tokens':>7} {head:>29}")
for w, h in [(256, 256), (512, 512), (1024, 1024), (4000, 3000)]:
    rw, rh, patches, n = cost(w, h)
    scores = vcfg.num_heads * patches**2 * 4 / 1e6            # one layer's fp32 attention scores
    record(**{f"scores_mb_{w}": f"{scores:,.0f}"})
    print(f"  {f'{w} x {h}':10} {patches:>8,} {n:>7,} {scores:>29,.0f}")
record(tower_params=f"{n_tower:,}", tower_mb_fp32=f"{4 * n_tower / 1e6:.0f}",
       tower_mb_bf16=f"{2 * n_tower / 1e6:.0f}")


def draw(t):
    import matplotlib.pyplot as plt

    sides = [round(64 * 1.05**i) for i in range(100) if 64 * 1.05**i <= 6000]
    mp = [s * s / 1e6 for s in sides]
    tokens = [cost(s, s)[3] for s in sides]
    fig, ax = plt.subplots(figsize=(6.8, 3.8))
    ax.plot(mp, tokens, color="C0", label=t("正方形的图", "square images"))
    named = [(name, w * h / 1e6, cost(w, h)[3]) for name, w, h in SIZES]
    ax.scatter([m for _, m, _ in named], [n for *_, n in named], color="C1", zorder=3,
               label=t("表中的图", "the table's images"))
    ZH = {"full HD": "全高清", "12 MP photo": "1200 万像素照片", "tall strip": "竖长条",
          "wide banner": "横幅"}
    # the tall strip and the wide banner cost almost the same: one label above, one below
    nudge = {"tall strip": (-8, 6, "right"), "256 x 256": (6, 2, "left")}
    for name, m, n in named:
        dx, dy, ha = nudge.get(name, (4, -10, "left"))
        ax.annotate(t(ZH.get(name, name), name), (m, n), xytext=(dx, dy),
                    textcoords="offset points", fontsize=8, ha=ha)
    ax.axhline(ocfg.max_pixels // (ocfg.patch_size * ocfg.merge_size) ** 2, color="grey",
               linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(t("原图像素（百万）", "megapixels of the original image"))
    ax.set_ylabel(t("文本中的 token 数", "tokens in the text"))
    ax.set_title(t(f"官方预算下一张图的代价：最少 {lowest}，最多 {highest:,} 个 token",
                   f"What an image costs, official budget: {lowest} to {highest:,} tokens"),
                 fontsize=10)
    ax.legend(loc="upper left", fontsize=9)
    return fig


save_figure("ch26_tokens", draw)
