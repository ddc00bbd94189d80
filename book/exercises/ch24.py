"""Chapter 24's exercises: the resampled position table, attention within each image, the patch
embedding as a matmul."""

import torch
import torch.nn.functional as F

from book.exercises import TODO, Unsolved, _close, _t, exercise  # noqa: F401
from qwen.vision import resample

__all__ = ["TODO", "check_ch24_resample", "check_ch24_image_mask", "check_ch24_patch_embed"]


def _stretch(table, h, w, **how):
    side = round(table.shape[0] ** 0.5)
    grid = F.interpolate(table.T.reshape(1, -1, side, side), size=(h, w), **how)
    return grid[0].permute(1, 2, 0)


@exercise("24.1")
def check_ch24_resample(stretch):
    """stretch(table [side * side, dim], h, w) -> [h, w, dim], the table resized bilinearly with
    align_corners, as qwen.vision.resample does."""
    g = torch.Generator().manual_seed(24)
    for side, dim, h, w in ((4, 3, 6, 10), (6, 5, 4, 3), (8, 2, 12, 5), (5, 4, 5, 5)):
        table = torch.randn(side * side, dim, generator=g)
        want = resample(table, h, w)
        got = torch.as_tensor(stretch(table.clone(), h, w))
        if _close(got, want):
            continue
        case = _t(
            f"{side} × {side} 的表拉伸到 {h} × {w}（高 × 宽）",
            f"a {side} × {side} table stretched to {h} × {w} (down × across)",
        )
        if got.shape != want.shape:
            if got.shape == (w, h, dim):
                hint = _t("先高后宽：你把 h 和 w 换了", "h (down) first, then w: they are swapped")
            elif got.shape[:2] == (side, side) or got.numel() == table.numel():
                hint = _t(
                    "表没有拉伸：每张图的网格都要插值到它自己的 h × w",
                    "the table was not resized: interpolate it to each image's own h × w",
                )
            else:
                hint = _t(
                    f"形状应为 {list(want.shape)}，得到 {list(got.shape)}",
                    f"the shape should be {list(want.shape)}, got {list(got.shape)}",
                )
            return [case, hint]
        grid = table.view(side, side, dim)
        wrong = {
            _t(
                "这是 align_corners=False：四个角的图块要正好取表的四个角",
                "that is align_corners=False: the corner patches must take the table's corners",
            ): _stretch(table, h, w, mode="bilinear", align_corners=False),
            _t(
                "这是最近邻：要用双线性插值（mode='bilinear'）",
                "that is nearest: interpolate bilinearly (mode='bilinear')",
            ): _stretch(table, h, w, mode="nearest"),
            _t(
                "表的行是位置，列是维度：先转置成 [dim, side, side] 再插值",
                "the table's rows are positions, its columns dims: transpose to "
                "[dim, side, side] before interpolating",
            ): F.interpolate(
                table.reshape(1, dim, side, side), size=(h, w), mode="bilinear", align_corners=True
            )[0].permute(1, 2, 0),
            _t(
                "表的第 r * side + c 行是第 r 行、第 c 列：你把行和列换了",
                "row r * side + c of the table is row r, column c: rows and columns are swapped",
            ): resample(grid.transpose(0, 1).reshape(-1, dim), h, w),
        }
        if h <= side and w <= side:
            wrong[
                _t(
                    "这是把表裁剪到 h × w：要插值，让整张表铺满整张图",
                    "that crops the table to h × w: interpolate, so the whole table covers the "
                    "whole image",
                )
            ] = grid[:h, :w]
        for hint, value in wrong.items():
            if _close(got, value):
                return [case, hint]
        return [
            case,
            _t(
                "F.interpolate(..., mode='bilinear', align_corners=True)，结果排成 [h, w, dim]",
                "F.interpolate(..., mode='bilinear', align_corners=True), the result as "
                "[h, w, dim]",
            ),
        ]
    return []


def _blocks(cu):
    n = cu[-1]
    mask = torch.zeros(n, n, dtype=torch.bool)
    for a, b in zip(cu[:-1], cu[1:]):
        mask[a:b, a:b] = True
    return mask


@exercise("24.2")
def check_ch24_image_mask(mask_of):
    """mask_of(cu_seqlens) -> bool [N, N]: True where patch i may read patch j, i.e. both are in
    the same image; cu_seqlens = [0, n1, n1 + n2, ...] as transformers passes it."""
    for cu in ([0, 4, 10], [0, 3], [0, 2, 7, 8], [0, 1, 2, 5]):
        want = _blocks(cu)
        got = torch.as_tensor(mask_of(list(cu)))
        n = len(cu) - 1
        case = _t(
            f"cu_seqlens {cu}（{n} 张图，各 {[b - a for a, b in zip(cu, cu[1:])]} 个图块）",
            f"cu_seqlens {cu} ({n} image(s) of {[b - a for a, b in zip(cu, cu[1:])]} patches)",
        )
        if got.shape != want.shape:
            return [
                case,
                _t(
                    f"形状应为 {list(want.shape)}（所有图的图块数 × 图块数），"
                    f"得到 {list(got.shape)}",
                    f"the shape should be {list(want.shape)} (all images' patches, both ways), "
                    f"got {list(got.shape)}",
                ),
            ]
        if got.dtype != torch.bool:
            return [
                case,
                _t(
                    f"要返回 bool 掩码（True = 可以读），得到 {got.dtype}",
                    f"return a bool mask (True = may read), got {got.dtype}",
                ),
            ]
        if torch.equal(got, want):
            continue
        if torch.equal(got, want.tril()):
            hint = _t(
                "这是因果掩码：视觉塔里每个图块读自己这张图的全部图块，前后都读",
                "that is causal: in the vision tower a patch reads every patch of its own image, "
                "before and after it",
            )
        elif got.all():
            hint = _t(
                "这是一张掩码管所有图：图块读到了别的图，同一批里的图要互不相见",
                "that is one mask over all images: patches read other images; images in one "
                "batch must not see each other",
            )
        else:
            i, j = (got != want).nonzero()[0].tolist()
            img = [sum(k >= c for c in cu[1:]) for k in (i, j)]
            hint = _t(
                f"图块 {i}（第 {img[0]} 张图）和图块 {j}（第 {img[1]} 张图）："
                f"应为 {bool(want[i, j])}。第 k 张图是 cu_seqlens[k] 到 cu_seqlens[k + 1] - 1",
                f"patch {i} (image {img[0]}) and patch {j} (image {img[1]}): should be "
                f"{bool(want[i, j])}. Image k is cu_seqlens[k] to cu_seqlens[k + 1] - 1",
            )
        return [case, hint]
    return []


@exercise("24.3")
def check_ch24_patch_embed(embed):
    """embed(rows [N, C * t * p * p], weight [hidden, C, t, p, p], bias [hidden]) -> [N, hidden],
    the Conv3d whose kernel equals its stride, as one matmul."""
    g = torch.Generator().manual_seed(24)
    for n, hidden, c, t, p in ((7, 5, 3, 2, 2), (4, 9, 3, 2, 3), (3, 6, 2, 1, 2)):
        rows = torch.randn(n, c * t * p * p, generator=g)
        weight = torch.randn(hidden, c, t, p, p, generator=g)
        bias = torch.randn(hidden, generator=g)
        want = F.conv3d(rows.view(n, c, t, p, p), weight, bias, stride=(t, p, p)).view(n, hidden)
        got = torch.as_tensor(embed(rows.clone(), weight.clone(), bias.clone()))
        if _close(got, want, atol=1e-5):
            continue
        case = _t(
            f"{n} 行，{c} 通道 × {t} 帧 × {p} × {p}，输出宽 {hidden}",
            f"{n} rows, {c} channels × {t} frames × {p} × {p}, width {hidden}",
        )
        if got.shape != want.shape:
            return [
                case,
                _t(
                    f"形状应为 {list(want.shape)}，得到 {list(got.shape)}：weight 展平成 "
                    "[hidden, C*t*p*p] 再转置",
                    f"the shape should be {list(want.shape)}, got {list(got.shape)}: flatten "
                    "weight to [hidden, C*t*p*p], then transpose it",
                ),
            ]
        wrong = {
            _t("少了偏置 bias", "the bias is missing"): want - bias,
            _t(
                "卷积核按 [C][t][y][x] 展平，和行的顺序一样：你把帧和通道换了",
                "flatten the kernel [C][t][y][x], the row's own order: channel and frame are "
                "swapped",
            ): rows @ weight.transpose(1, 2).flatten(1).T + bias,
            _t(
                "卷积核按 [C][t][y][x] 展平：你把 y 和 x 换了",
                "flatten the kernel [C][t][y][x]: y and x are swapped",
            ): rows @ weight.transpose(3, 4).flatten(1).T + bias,
        }
        for hint, value in wrong.items():
            if _close(got, value, atol=1e-5):
                return [case, hint]
        return [
            case,
            _t("rows @ weight.flatten(1).T + bias", "rows @ weight.flatten(1).T + bias"),
        ]
    return []
