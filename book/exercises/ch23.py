"""Chapter 23's exercises: the smart resize, patches in the merger's order, the normalization."""

import random

import torch

from book.exercises import TODO, Unsolved, _close, _t, exercise  # noqa: F401
from qwen.image import ImageConfig, smart_resize, to_patches

__all__ = ["TODO", "check_ch23_smart_resize", "check_ch23_patches", "check_ch23_normalize"]

OFFICIAL = (32, 65536, 16777216)  # factor, min_pixels, max_pixels of Qwen3.5-0.8B
TINY = (8, 1024, 16384)  # the tiny test model's


def _resize_cases():
    """(height, width, factor, min_pixels, max_pixels): named cases first, then random ones."""
    cases = [
        (600, 512, *OFFICIAL),  # the photograph: 600 -> 608 to the nearest, 576 rounded down
        (1080, 1920, *OFFICIAL),  # full HD: 1080 -> 1088
        (30, 40, *OFFICIAL),  # below the minimum: grows
        (2000, 300, *OFFICIAL),  # tall
        (200, 3000, *OFFICIAL),  # wide
        (4000, 6000, *OFFICIAL),  # above the maximum: shrinks
        (144, 80, 32, 1024, 10**8),  # 4.5 and 2.5 exactly: round() goes to the even 4 and 2
        (13, 9, *TINY),
        (300, 40, *TINY),
        (130, 170, *TINY),
    ]
    rng = random.Random(24)
    for factor, lo, hi in (OFFICIAL, TINY, (28, 3136, 1003520)):
        for _ in range(100):
            h, w = rng.randint(factor // 2, 5000), rng.randint(factor // 2, 5000)
            if max(h, w) <= 200 * min(h, w):
                cases.append((h, w, factor, lo, hi))
    return cases


def _kind(h, w, factor, lo, hi):
    near = round(h / factor) * factor * round(w / factor) * factor
    if near > hi:
        return _t("超过上限", "above the maximum")
    if near < lo:
        return _t("低于下限", "below the minimum")
    return _t("在预算之内", "within the budget")


@exercise("23.1")
def check_ch23_smart_resize(resize):
    """resize(height, width, factor, min_pixels, max_pixels) -> (height, width), as the
    processor resizes."""
    for h, w, factor, lo, hi in _resize_cases():
        want = smart_resize(h, w, factor, lo, hi)
        got = resize(h, w, factor, lo, hi)
        try:
            got = tuple(int(v) for v in got)
        except TypeError:
            got = (got,)
        if got == want:
            continue
        case = _t(
            f"高 {h}、宽 {w}（factor {factor}，面积 [{lo:,}, {hi:,}]，"
            f"{_kind(h, w, factor, lo, hi)}）应得 {want}，得到 {got}",
            f"height {h}, width {w} (factor {factor}, area [{lo:,}, {hi:,}], "
            f"{_kind(h, w, factor, lo, hi)}) should give {want}, got {got}",
        )
        if len(got) != 2:
            return [case, _t("返回 (高, 宽) 两个数", "return two numbers, (height, width)")]
        gh, gw = got
        floor = (h // factor * factor, w // factor * factor)
        if got == want[::-1]:
            hint = _t("先高后宽：你把两边换了", "height first, then width: the sides are swapped")
        elif gh % factor or gw % factor:
            hint = _t(f"两边都必须是 {factor} 的倍数", f"both sides must be multiples of {factor}")
        elif gh * gw > hi:
            hint = _t(
                "面积超过了 max_pixels：要两边按同一个比例缩小，再向下取整",
                "the area is above max_pixels: shrink both sides by one factor, then round down",
            )
        elif gh * gw < lo:
            hint = _t(
                "面积低于 min_pixels：要两边按同一个比例放大，再向上取整",
                "the area is below min_pixels: grow both sides by one factor, then round up",
            )
        elif got == floor and lo <= floor[0] * floor[1] <= hi:
            hint = _t(
                "这是向下取整：要取最近的倍数（round）",
                "that rounds down: take the nearest multiple (round)",
            )
        elif any(abs(s / factor - int(s / factor) - 0.5) < 1e-12 for s in (h, w)):
            hint = _t(
                "正好一半时 Python 的 round() 取偶数（2.5 → 2），处理器就是这样取的",
                "at exactly half way Python's round() goes to the even number (2.5 -> 2), "
                "and so does the processor",
            )
        else:
            hint = _t(
                "按预算放大或缩小时，两边用同一个比例 beta = sqrt(面积比)",
                "to grow or shrink, both sides use one factor beta = sqrt(area ratio)",
            )
        return [case, hint]
    return []


def _patch_order(h, w, m=2):
    """Patch numbers (row by row) in the order the merger wants them: 2 x 2 block by block."""
    ids = torch.arange(float(h * w)).view(1, h, w).expand(3, h, w)
    return to_patches(ids, ImageConfig(patch_size=1, temporal_patch_size=1, merge_size=m))[0][:, 0]


def _row_order(pixels, p, t):
    C, H, W = pixels.shape
    x = pixels.reshape(C, H // p, p, W // p, p).permute(1, 3, 0, 2, 4)  # [h, w, C, p, p]
    x = x.unsqueeze(3).expand(H // p, W // p, C, t, p, p)
    return x.reshape(-1, C * t * p * p)


@exercise("23.2")
def check_ch23_patches(cut):
    """cut(pixels [3, H, W], patch_size, temporal_patch_size, merge_size) -> the patch rows
    [h * w, 3 * t * p * p], in the merger's order and the processor's row layout."""
    g = torch.Generator().manual_seed(24)
    for h, w, p, t in ((4, 6, 2, 2), (4, 6, 3, 2), (6, 4, 2, 2), (2, 8, 4, 2), (4, 4, 2, 1)):
        pixels = torch.randn(3, h * p, w * p, generator=g)
        cfg = ImageConfig(patch_size=p, temporal_patch_size=t, merge_size=2)
        want = to_patches(pixels, cfg)[0]
        got = torch.as_tensor(cut(pixels, p, t, 2))
        if _close(got, want, atol=0, rtol=0):
            continue
        case = _t(
            f"{h} × {w} 个图块（高 × 宽），patch {p}，{t} 帧",
            f"{h} × {w} patches (down × across), patch {p}, {t} frames",
        )
        if got.shape != want.shape:
            return [
                case
                + _t(
                    f"：形状应为 {list(want.shape)}，得到 {list(got.shape)}",
                    f": the shape should be {list(want.shape)}, got {list(got.shape)}",
                ),
                _t(
                    f"每行是 3 × {t} × {p} × {p} 个数：静止图像要复制成 {t} 帧",
                    f"a row holds 3 × {t} × {p} × {p} numbers: the still image is {t} equal frames",
                ),
            ]
        # which patch does each row hold? cut an image whose pixels are their patch's number
        ids = torch.arange(float(h * w)).view(h, w).repeat_interleave(p, 0).repeat_interleave(p, 1)
        order = torch.as_tensor(cut(ids.expand(3, -1, -1).contiguous(), p, t, 2))[:, 0]
        expected = _patch_order(h, w)
        if not torch.equal(order, expected):
            first = [int(v) for v in order[:8]]
            hint = _t(
                f"行里的图块（按逐行编号）是 {first} ……，合并器要的是 "
                f"{[int(v) for v in expected[:8]]} ……：2 × 2 一块一块地排",
                f"the rows hold patches (numbered row by row) {first} ..., the merger needs "
                f"{[int(v) for v in expected[:8]]} ...: 2 × 2 block by block",
            )
            if torch.equal(order, torch.arange(float(h * w))):
                hint = _t(
                    "这是逐行的顺序：合并器把连续 4 行拼成一个词元，它们必须是一个 2 × 2 块",
                    "that is row order: the merger joins 4 rows in a row into one token, "
                    "so they must be one 2 × 2 block",
                )
            return [case, hint]
        t_first = want.view(-1, 3, t, p * p).transpose(1, 2).reshape(want.shape)
        transposed = want.view(-1, 3, t, p, p).transpose(3, 4).reshape(want.shape)
        if t > 1 and _close(got, t_first, atol=0, rtol=0):
            hint = _t(
                "行内的顺序是 [通道][帧][y][x]：通道在前，帧在后",
                "inside a row the order is [channel][frame][y][x]: channel first, then frame",
            )
        elif _close(got, transposed, atol=0, rtol=0):
            hint = _t(
                "图块内先按行（y）再按列（x）：你把 y 和 x 换了",
                "inside a patch, y (down) comes before x (across): they are swapped",
            )
        else:
            hint = _t(
                "图块对了，行内的数不对：应为 [通道][帧][y][x]",
                "the patches are right, the numbers inside a row are not: [channel][frame][y][x]",
            )
        return [case, hint]
    return []


CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))


@exercise("23.3")
def check_ch23_normalize(normalize):
    """normalize(pixels [3, H, W] of 0..255, mean, std) -> (pixels / 255 - mean) / std, per
    channel."""
    g = torch.Generator().manual_seed(24)
    pixels = torch.randint(0, 256, (3, 5, 7), generator=g, dtype=torch.uint8)
    for name, (mean, std) in (("Qwen3.5", ((0.5,) * 3, (0.5,) * 3)), ("CLIP", CLIP)):
        m, s = torch.tensor(mean).view(3, 1, 1), torch.tensor(std).view(3, 1, 1)
        x = pixels.float() / 255
        want = (x - m) / s
        got = torch.as_tensor(normalize(pixels.clone(), mean, std))
        if _close(got, want, atol=1e-5):
            continue
        case = _t(f"mean {mean}、std {std}（{name}）", f"mean {mean}, std {std} ({name})")
        if got.shape != want.shape:
            return [
                case,
                _t(
                    f"形状应为 {list(want.shape)}，得到 {list(got.shape)}："
                    "mean 和 std 是每个通道一个数，通道在第 0 维",
                    f"the shape should be {list(want.shape)}, got {list(got.shape)}: "
                    "mean and std are one number per channel, on dimension 0",
                ),
            ]
        wrong = {
            _t(
                "只缩放到了 [0, 1]：还要减 mean、除以 std",
                "only rescaled to [0, 1]: subtract the mean and divide by the std too",
            ): x,
            _t("mean 和 std 用反了", "mean and std are swapped"): (x - s) / m,
            _t(
                "x / 127.5 - 1 只在 mean = std = 0.5 时对：用配置里的值",
                "x / 127.5 - 1 is right for mean = std = 0.5 only: use the config's values",
            ): (pixels.float() / 127.5 - 1),
            _t(
                "先除以 255 缩放到 [0, 1]，再减 mean、除以 std",
                "rescale to [0, 1] first (divide by 255), then subtract the mean and divide by "
                "the std",
            ): (pixels.float() - m) / s,
        }
        for hint, value in wrong.items():
            if _close(got, value, atol=1e-5):
                return [case, hint]
        return [
            case,
            _t("每个通道：(x / 255 - mean) / std", "each channel: (x / 255 - mean) / std"),
        ]
    return []
