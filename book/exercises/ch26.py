"""Chapter 26's exercises: what an image costs in tokens, the image rows in the prompt."""

import random

import torch

from book.exercises import TODO, Unsolved, _close, _t, exercise  # noqa: F401
from qwen.image import smart_resize

__all__ = ["TODO", "check_ch26_tokens", "check_ch26_place"]

OFFICIAL = (16, 2, 65536, 16777216)  # patch, merge, min_pixels, max_pixels of Qwen3.5-0.8B
TINY = (4, 2, 1024, 16384)  # the tiny test model's


def _tokens(h, w, patch, merge, lo, hi):
    rh, rw = smart_resize(h, w, patch * merge, lo, hi)
    return (rh // patch) * (rw // patch) // merge**2


def _token_cases():
    """(height, width, patch, merge, min_pixels, max_pixels): named cases, then random ones."""
    cases = [
        (600, 512, *OFFICIAL),  # the photograph: 600 -> 608, to the nearest 32
        (1080, 1920, *OFFICIAL),  # full HD: 1080 -> 1088
        (30, 40, *OFFICIAL),  # an icon, below the minimum: grows
        (3000, 4000, *OFFICIAL),  # a 12 MP photo
        (4000, 6000, *OFFICIAL),  # 24 MP, above the maximum: shrinks
        (2000, 300, *OFFICIAL),  # tall
        (130, 170, *TINY),
    ]
    rng = random.Random(26)
    for budget in (OFFICIAL, TINY):
        for _ in range(100):
            h, w = rng.randint(16, 5000), rng.randint(16, 5000)
            if max(h, w) <= 200 * min(h, w):
                cases.append((h, w, *budget))
    return cases


@exercise("26.1")
def check_ch26_tokens(tokens):
    """tokens(height, width, patch, merge, min_pixels, max_pixels) -> how many <|image_pad|>
    the image takes in the prompt."""
    for h, w, patch, merge, lo, hi in _token_cases():
        want = _tokens(h, w, patch, merge, lo, hi)
        got = tokens(h, w, patch, merge, lo, hi)
        if isinstance(got, (int, float)) and not isinstance(got, bool) and got == want:
            continue
        f = patch * merge
        near = round(h / f) * f * round(w / f) * f
        where = (
            _t("超过上限", "above the maximum")
            if near > hi
            else _t("低于下限", "below the minimum")
            if near < lo
            else _t("在预算之内", "within the budget")
        )
        case = _t(
            f"高 {h}、宽 {w}（patch {patch}，合并 {merge}，面积 [{lo:,}, {hi:,}]，{where}）"
            f"应得 {want}，得到 {got}",
            f"height {h}, width {w} (patch {patch}, merge {merge}, area [{lo:,}, {hi:,}], "
            f"{where}) should give {want}, got {got}",
        )
        rh, rw = smart_resize(h, w, f, lo, hi)
        floor = (h // f * f) * (w // f * f) // patch**2 // merge**2
        if got == want * merge**2:
            hint = _t(
                f"这是图块数：合并器把 {merge} × {merge} 个图块拼成一个 token，要再除以 {merge**2}",
                f"that is the number of patches: the merger joins {merge} × {merge} patches into "
                f"one token, divide by {merge**2}",
            )
        elif near > hi or near < lo:
            hint = _t(
                "面积出了预算：两边要按同一个比例缩放（smart_resize 的规则），不能只取最近的倍数",
                "the area leaves the budget: both sides scale by one factor (smart_resize's "
                "rule), not just the nearest multiples",
            )
        elif got == floor:
            hint = _t(
                f"这是向下取整：每条边要取最近的 {f} 的倍数（round），{h} → {rh}，{w} → {rw}",
                f"that rounds down: each side goes to the nearest multiple of {f} (round), "
                f"{h} -> {rh}, {w} -> {rw}",
            )
        else:
            hint = _t(
                f"缩放后是 {rw} × {rh}，即 {rh // patch} × {rw // patch} 个图块",
                f"resized it is {rw} × {rh}, i.e. {rh // patch} × {rw // patch} patches",
            )
        return [case, hint]
    return []


def _prompts():
    """(name, ids [B, T], features, image sizes in order): one image, two images, a batch of 2."""
    P = 9  # the pad id
    one = [[1, 2, P, P, P, 3, 4]]
    two = [[1, P, P, 2, 5, P, P, P, 3]]
    batch = [[1, P, P, 2, 3, 4, 0], [5, 6, P, P, P, P, 7]]
    return P, [
        (_t("一张图、一个提示词", "one image, one prompt"), one, [3]),
        (_t("一个提示词里两张图", "two images in one prompt"), two, [2, 3]),
        (
            _t("两个提示词的一批（每个一张图）", "a batch of 2 prompts, one image each"),
            batch,
            [2, 4],
        ),
    ]


@exercise("26.2")
def check_ch26_place(place):
    """place(x [B, T, dim], ids [B, T], pad, features [tokens, dim]) -> x with the rows at the
    pads replaced by the features in order; the input x unchanged; a count that does not match
    refused with ValueError."""
    g = torch.Generator().manual_seed(26)
    pad, prompts = _prompts()
    for name, rows, sizes in prompts:
        ids = torch.tensor(rows)
        x = torch.randn(*ids.shape, 4, generator=g)
        features = torch.randn(sum(sizes), 4, generator=g)
        mask = ids == pad
        want = x.masked_scatter(mask[..., None], features)
        before = x.clone()
        got = place(x, ids, pad, features)
        if not torch.equal(x, before):
            return [
                name,
                _t(
                    "你改了输入的 x：先 clone 一份再写（模型的嵌入还要给别的调用用）",
                    "the input x was changed: write into a clone (the embeddings are reused)",
                ),
            ]
        got = torch.as_tensor(got)
        if _close(got, want, atol=0, rtol=0):
            continue
        case = _t(f"{name}：结果不对", f"{name}: the result is wrong")
        if got.shape != want.shape:
            return [
                case,
                _t(
                    f"形状应为 {list(want.shape)}（和 x 一样），得到 {list(got.shape)}",
                    f"the shape should be {list(want.shape)} (that of x), got {list(got.shape)}",
                ),
            ]
        chunks = list(features.split(sizes))
        swapped = x.masked_scatter(mask[..., None], torch.cat(chunks[::-1]))
        shifted = [torch.roll(mask, s, dims=1) for s in (1, -1)]
        if len(sizes) > 1 and _close(got, swapped, atol=0, rtol=0):
            hint = _t(
                "图的顺序反了：第一张图的行放进第一串 <|image_pad|>",
                "the images are out of order: the first image's rows go into the first run of pads",
            )
        elif any(_close(got, x.masked_scatter(s[..., None], features), 0, 0) for s in shifted):
            hint = _t(
                "差了一个位置：特征要正好放在 ids == pad 的位置上",
                "off by one: the features go exactly where ids == pad",
            )
        elif ids.shape[0] > 1:
            hint = _t(
                "一批里，第 2 个提示词的图紧接在第 1 个的后面："
                "按 [B, T] 的顺序填（布尔掩码就是这个顺序）",
                "in a batch, prompt 2's image follows prompt 1's: fill in [B, T] order "
                "(a boolean mask's order)",
            )
        else:
            hint = _t(
                "pad 位置上的行应是 features 的行，按顺序；其它行不变",
                "the rows at the pads are the features' rows, in order; the other rows stay",
            )
        return [case, hint]
    ids = torch.tensor([[1, pad, pad, 2]])
    try:
        place(torch.zeros(1, 4, 4), ids, pad, torch.zeros(3, 4))
    except ValueError:
        return []
    except Exception as e:
        return [
            _t("2 个 pad、3 行特征", "2 pads, 3 feature rows"),
            _t(
                f"应抛出 ValueError（说清两个数），得到 {type(e).__name__}",
                f"raise ValueError (naming both counts), got {type(e).__name__}",
            ),
        ]
    return [
        _t("2 个 pad、3 行特征", "2 pads, 3 feature rows"),
        _t(
            "个数不符时要拒绝（ValueError），不要悄悄地只放一部分",
            "a count that does not match must be refused (ValueError), not placed in part",
        ),
    ]
