"""Benchmark of an image in the chat (chapter 26): the vision tower and the whole image prompt's
prefill (tower, then the text model over the image's tokens) at the 0.8B shapes, in fp32 and in
bf16, side by side on this CPU.

    python scripts/bench_vision.py               # measure and print (2 threads)
    python scripts/bench_vision.py --write       # docs/outputs/bench_vision.txt/.json (the book)
    python scripts/bench_vision.py --smoke       # the tiny test model's shapes: seconds

The weights are random (seeded; time does not depend on their values) in the official layout of
book/data/qwen3.5-0.8b/config.json. Each system is timed interleaved (round-robin, after a warm-up),
each number the median of the repeats. Which dtype is faster is a property of the CPU (native bf16
matrix instructions or not), so the verdict is measured here and recorded with the CPU's features.
"""

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from book.bench.machine import cpu_info, machine_name  # noqa: E402
from qwen import vlm  # noqa: E402
from qwen.image import ImageConfig, Images, smart_resize  # noqa: E402
from qwen.model import Qwen  # noqa: E402
from qwen.timing import rounds  # noqa: E402
from qwen.vision import VisionConfig, VisionModel  # noqa: E402
from qwen.weights import Config  # noqa: E402

OFFICIAL = ROOT / "book" / "data" / "qwen3.5-0.8b"  # the official config files, no weights
SIZES = [(256, 256), (512, 512)]  # square images, width x height
TEMPLATE = 20  # text tokens around the image: ch26's prompt


def models(folder):
    """The QwenVL of the folder's config with seeded random weights, in fp32."""
    from qwen.norm import RMSNorm, RMSNormGated

    torch.manual_seed(0)
    text, tower = Qwen(Config.load(folder)), VisionModel(VisionConfig.load(folder))
    with torch.no_grad():
        for m in [*text.modules(), *tower.modules()]:
            for name, p in m.named_parameters(recurse=False):
                if isinstance(m, RMSNorm) or name in ("A_log", "dt_bias", "bias"):
                    p.zero_()  # (1 + w) scales 1; decay rate 1; no shift
                elif isinstance(m, (RMSNormGated, torch.nn.LayerNorm)):
                    p.fill_(1.0)  # plain scales
                else:
                    p.normal_(0, 0.02)
    tokens = vlm.vision_tokens(folder)
    return vlm.QwenVL(text, tower, tokens, vlm.mrope_sections(folder)).requires_grad_(False)


def prompt(model, icfg, w, h):
    """The ids of one w x h image and TEMPLATE text tokens, and random pixels of its size."""
    rh, rw = smart_resize(h, w, icfg.factor, icfg.min_pixels, icfg.max_pixels)
    grid = torch.tensor([[1, rh // icfg.patch_size, rw // icfg.patch_size]])
    patches = int(grid.prod())
    n = patches // icfg.merge_size**2
    width = 3 * icfg.temporal_patch_size * icfg.patch_size**2
    images = Images(torch.randn(patches, width), grid)
    text = torch.randint(1000, 2000, (TEMPLATE,)).tolist()
    ids = torch.tensor([text[:10] + vlm.image_ids(model.tokens, n) + text[10:]])
    return ids, images, patches, n


def measure(folder, repeats, sizes):
    icfg = ImageConfig.load(folder)
    fp32 = models(folder)
    bf16 = models(folder).to(torch.bfloat16)
    res = {
        "params_tower": sum(p.numel() for p in fp32.visual.parameters()),
        "params_text": sum(p.numel() for p in fp32.text.parameters()),
        "sizes": [],
    }
    for w, h in sizes:
        ids, images, patches, n = prompt(fp32, icfg, w, h)
        runs = {}
        for dtype, m in (("fp32", fp32), ("bf16", bf16)):
            im = Images(images.pixels.to(m.visual.patch_embed.proj.weight.dtype), images.grid)
            runs[f"tower {dtype}"] = lambda m=m, im=im: m.see(im)
            runs[f"prefill {dtype}"] = lambda m=m, im=im, ids=ids: m(ids, m.new_cache(), True, im)
        with torch.no_grad():
            times = rounds(runs, repeats)
        ms = {k: 1e3 * sorted(t)[len(t) // 2] for k, t in times.items()}
        res["sizes"].append(
            {
                "width": w,
                "height": h,
                "patches": patches,
                "tokens": n,
                "prompt_tokens": ids.shape[1],
                "ms": ms,
            }
        )
    return res


def report(res):
    lines = [
        f"the image prompt at {res['model']}, CPU: {res['cpu']['name']} "
        f"({res['cpu']['torch_capability']}, oneDNN bf16: {res['cpu']['onednn_bf16']}), "
        f"{res['threads']} thread(s), torch {res['torch']}; median of {res['repeats']}:",
        f"  vision tower {res['params_tower']:,} parameters, text model {res['params_text']:,}",
        f"  {'image':10} {'patches':>8} {'tokens':>7} {'prompt':>7} {'tower ms':>16} "
        f"{'prefill ms':>16} {'bf16/fp32':>10}",
        f"  {'':10} {'':>8} {'':>7} {'':>7} {'fp32':>8}{'bf16':>8} {'fp32':>8}{'bf16':>8}",
    ]
    for s in res["sizes"]:
        ms = s["ms"]
        lines.append(
            f"  {str(s['width']) + ' x ' + str(s['height']):10} {s['patches']:>8,} "
            f"{s['tokens']:>7,} {s['prompt_tokens']:>7,} {ms['tower fp32']:>8.0f}"
            f"{ms['tower bf16']:>8.0f} {ms['prefill fp32']:>8.0f}{ms['prefill bf16']:>8.0f} "
            f"{ms['prefill bf16'] / ms['prefill fp32']:>10.2f}"
        )
    lines.append(f"  the faster prefill on this CPU at the largest size: {verdict(res)}")
    return "\n".join(lines)


def verdict(res):
    ms = res["sizes"][-1]["ms"]
    return "bf16" if ms["prefill bf16"] < ms["prefill fp32"] else "fp32"


def values(res):
    v = {
        "cpu": res["cpu"]["name"],
        "threads": str(res["threads"]),
        "faster": verdict(res),
        "onednn_bf16": "yes" if res["cpu"]["onednn_bf16"] else "no",
        "capability": res["cpu"]["torch_capability"],
    }
    for s in res["sizes"]:
        w, ms = s["width"], s["ms"]
        v.update(
            {
                f"tower_fp32_{w}": f"{ms['tower fp32']:,.0f}",
                f"tower_bf16_{w}": f"{ms['tower bf16']:,.0f}",
                f"prefill_fp32_{w}": f"{ms['prefill fp32']:,.0f}",
                f"prefill_bf16_{w}": f"{ms['prefill bf16']:,.0f}",
                f"ratio_{w}": f"{ms['prefill bf16'] / ms['prefill fp32']:.2f}",
                f"tower_share_{w}": f"{ms['tower fp32'] / ms['prefill fp32']:.0%}",
                f"prompt_{w}": f"{s['prompt_tokens']:,}",
            }
        )
    return v


def write(res, text):
    from book import regen

    prov = {
        "script": "scripts/bench_vision.py",
        "model": res["model"],
        "official": False,
        "weights_sha256": None,  # seeded random weights made in the run, no file read
        "torch": res["torch"],
        "python": platform.python_version(),
        "device": f"cpu ({platform.machine()}, {res['threads']} threads)",
        "dtype": "float32, bfloat16",
        "seconds": round(res["seconds"], 1),
        "values": values(res),
        "figures": [],
        "measured": True,
        "machine": res["machine"],
        "cpu": res["cpu"],
        "threads": res["threads"],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "load": res["load_avg"],
        "results": res,
    }
    files = {
        "outputs/bench_vision.txt": (text + "\n").encode(),
        "outputs/bench_vision.json": regen.provenance_bytes(prov),
    }
    regen.replace_set(ROOT / "docs", "bench_vision", files)
    print(f"wrote docs/{', docs/'.join(files)}", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write docs/outputs/bench_vision.*")
    ap.add_argument("--smoke", action="store_true", help="the tiny model's shapes, not written")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if args.write and args.smoke:
        ap.error("--write records the book's full run; a --smoke run is not written")
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    t0, load0 = time.perf_counter(), os.getloadavg()
    res = {
        "model": "the tiny test model's shapes (smoke)"
        if args.smoke
        else "the 0.8B shapes, random weights",
        "cpu": cpu_info(),
        "machine": machine_name(),
        "threads": args.threads,
        "torch": torch.__version__,
        "repeats": args.repeats,
    }
    if args.smoke:
        from book.tiny import path as tiny_folder

        res.update(measure(tiny_folder(), 1, [(64, 64), (128, 96)]), repeats=1)
    else:
        res.update(measure(OFFICIAL, args.repeats, SIZES))
    res["seconds"] = time.perf_counter() - t0
    res["load_avg"] = {"before": load0, "after": os.getloadavg()}
    text = report(res)
    print(text)
    if args.write:
        write(res, text)
    return res


if __name__ == "__main__":
    main()
