"""Chapter 25's exercises: the interleaved axis of each frequency, the positions of a prompt with an
image, the position of a decode step."""

import torch

from book.exercises import TODO, Unsolved, _close, _t, exercise  # noqa: F401
from qwen.mrope import MRotaryEmbedding, rope_index

__all__ = ["TODO", "check_ch25_axes", "check_ch25_positions", "check_ch25_decode"]

AXIS = {0: ("时间", "time"), 1: ("高", "height"), 2: ("宽", "width")}
PAD = 248056  # <|image_pad|> in Qwen3.5's config.json


def _axes(sections):
    """What qwen.mrope.MRotaryEmbedding reads: the axis of each of the sum(sections) frequencies."""
    n = sum(sections)
    return MRotaryEmbedding(2 * n, 1.0, 1e7, sections).axis.tolist()


def _name(a):
    return _t(*AXIS[a]) if a in AXIS else repr(a)


@exercise("25.1")
def check_ch25_axes(axes):
    """axes(sections) -> for each frequency j < sum(sections), 0 (time), 1 (height) or 2 (width)."""
    for sections in ([11, 11, 10], [2, 1, 1], [3, 3, 2], [24, 20, 20]):
        want = _axes(sections)
        got = axes(list(sections))
        got = [int(a) for a in (got.tolist() if torch.is_tensor(got) else got)]
        if got == want:
            continue
        case = _t(f"mrope_section {sections}", f"mrope_section {sections}")
        if len(got) != len(want):
            return [
                case,
                _t(
                    f"应有 {len(want)} 个频率（各段之和），得到 {len(got)} 个",
                    f"there are {len(want)} frequencies (the sections' sum), got {len(got)}",
                ),
            ]
        blocks = [a for a, s in enumerate(sections) for _ in range(s)]
        swapped = [{1: 2, 2: 1}.get(a, a) for a in want]
        unlimited = [j % 3 for j in range(len(want))]
        j = next(j for j, (g, w) in enumerate(zip(got, want)) if g != w)
        where = _t(
            f"频率 {j} 应读{_name(want[j])}，得到{_name(got[j])}",
            f"frequency {j} reads {_name(want[j])}, got {_name(got[j])}",
        )
        if got == blocks:
            hint = _t(
                "这是 Qwen2-VL 的分块 [t…t, h…h, w…w]：Qwen3.5 交错排列，j % 3 == 1 读高，"
                "j % 3 == 2 读宽",
                "that is Qwen2-VL's contiguous blocks [t…t, h…h, w…w]: Qwen3.5 interleaves, "
                "j % 3 == 1 reads height, j % 3 == 2 width",
            )
        elif got == swapped:
            hint = _t(
                "高和宽换了：j % 3 == 1 读高（行），j % 3 == 2 读宽（列）",
                "height and width are swapped: j % 3 == 1 reads height (the row), "
                "j % 3 == 2 width (the column)",
            )
        elif got == unlimited:
            hint = _t(
                f"高只占前 3 × {sections[1]} 个频率里的，宽只占前 3 × {sections[2]} 个里的，"
                "其余的都读时间",
                f"height takes its j only below 3 × {sections[1]}, width only below "
                f"3 × {sections[2]}; every other frequency reads time",
            )
        else:
            hint = _t(
                "j % 3 == 1（且 j < 3 × 高的段长）读高，j % 3 == 2（且 j < 3 × 宽的段长）"
                "读宽，其余读时间",
                "j % 3 == 1 (below 3 × the height section) reads height, j % 3 == 2 (below "
                "3 × the width section) width, the rest time",
            )
        return [case + _t("：", ": ") + where, hint]
    return []


def _prompt(before, h, w, after):
    """Token ids: `before` text tokens, an image of h x w tokens, `after` text tokens."""
    return [1000 + i for i in range(before)] + [PAD] * (h * w) + [2000 + i for i in range(after)]


def _as_positions(got, T):
    got = torch.as_tensor(got)
    if got.dim() == 3 and got.shape[1] == 1:  # [3, 1, T] is fine too
        got = got[:, 0]
    return got.long() if got.shape == (3, T) else got


def _want(ids, h, w):
    return rope_index(torch.tensor([ids]), torch.tensor([[1, 2 * h, 2 * w]]), PAD, 2)[0][:, 0]


@exercise("25.2")
def check_ch25_positions(positions):
    """positions(ids, h, w, image_token_id) -> [3, T] (time, height, width) of a prompt whose run
    of h * w image tokens is one image of h rows and w columns of tokens."""
    for before, h, w, after in (
        (5, 2, 3, 4),
        (3, 3, 2, 2),
        (0, 2, 3, 3),
        (7, 4, 1, 2),
        (2, 3, 3, 1),
    ):
        ids = _prompt(before, h, w, after)
        want = _want(ids, h, w)
        got = _as_positions(positions(list(ids), h, w, PAD), len(ids))
        if torch.equal(got, want):
            continue
        case = _t(
            f"{before} 个文本词元、一张 {h} 行 × {w} 列的图像、再 {after} 个文本词元",
            f"{before} text tokens, an image of {h} rows × {w} columns, {after} more text tokens",
        )
        if got.shape != want.shape:
            return [
                case,
                _t(
                    f"形状应为 {list(want.shape)}（时间、高、宽三行），得到 {list(got.shape)}",
                    f"the shape should be {list(want.shape)} (rows time, height, "
                    f"width), got {list(got.shape)}",
                ),
            ]
        start, end, n = before, before + h * w, h * w
        if not torch.equal(got[:, :start], want[:, :start]):
            return [
                case,
                _t(
                    "图像前的文本：第 i 个词元的三个位置都是 i",
                    "the text before the image: token i has all three positions i",
                ),
            ]
        image, right = got[:, start:end], want[:, start:end]
        if not torch.equal(image, right):
            rows = torch.arange(h).repeat_interleave(w)
            cols = torch.arange(w).repeat(h)
            if torch.equal(image, right - start):
                hint = _t(
                    f"图像的位置要从它开始的位置 {start} 算起，不是从 0",
                    f"the image's positions count from where it starts, {start}, not from 0",
                )
            elif torch.equal(image[1:], torch.stack([cols, rows]) + start) or torch.equal(
                image[1:], torch.stack([torch.arange(n) % h, torch.arange(n) // h]) + start
            ):
                hint = _t(
                    "行和列换了：图像词元按行存放，第 k 个在第 k // w 行、第 k % w 列；"
                    "高读行，宽读列",
                    "rows and columns are swapped: the image's tokens are stored row by "
                    "row, token k in row k // w, column k % w; height reads the row, "
                    "width the column",
                )
            elif torch.equal(image[0], torch.arange(start, end)):
                hint = _t(
                    "时间轴：一张静止图像只有一帧，它所有词元的时间位置都是开始的位置",
                    "the time axis: a still image is one frame, all its tokens have the "
                    "start position as their time",
                )
            else:
                hint = _t(
                    f"图像的第 k 个词元：(开始, 开始 + k // w, 开始 + k % w)，开始 = {start}",
                    f"the image's token k: (start, start + k // w, start + k % w), start = {start}",
                )
            return [case, hint]
        if after and torch.equal(got[:, end], torch.full((3,), end)):
            hint = _t(
                f"图像后的文本从 {start} + max({h}, {w}) = {start + max(h, w)} 接着数，"
                f"不是从词元个数 {start} + {n} = {end}",
                f"the text after the image continues from {start} + max({h}, {w}) = "
                f"{start + max(h, w)}, not from the token count {start} + {n} = {end}",
            )
        elif after and torch.equal(got[:, end], torch.full((3,), start + min(h, w))):
            hint = _t(
                "图像后的文本从开始 + max(h, w) 接着数：取大的一边",
                "the text after the image continues from start + max(h, w): the larger side",
            )
        else:
            hint = _t(
                "图像后的文本：三个位置相等，从开始 + max(h, w) 起一个一个往后",
                "the text after the image: three equal positions, one by one from start "
                "+ max(h, w)",
            )
        return [case, hint]
    return []


@exercise("25.3")
def check_ch25_decode(decode_position):
    """decode_position(positions [3, T] of the prompt, past) -> the position of the token at index
    past (past >= T), the same on all three axes."""
    for before, h, w, after in ((5, 2, 3, 4), (3, 4, 3, 2), (6, 1, 1, 3)):
        ids = _prompt(before, h, w, after)
        prompt = _want(ids, h, w)
        T = len(ids)
        delta = prompt.max().item() + 1 - T
        for past in (T, T + 1, T + 7):
            want = past + delta
            got = decode_position(prompt.clone(), past)
            got = torch.as_tensor(got).flatten().tolist()
            if len(set(got)) == 1 and got[0] == want:
                continue
            case = _t(
                f"{T} 个词元的提示词（一张 {h} × {w} 的图像），第 {past} 个词元",
                f"a prompt of {T} tokens (an image of {h} × {w}), the token at index {past}",
            )
            if len(set(got)) > 1:
                hint = _t(
                    "解码出的都是文本：三个轴的位置相等",
                    "decoded tokens are text: their three positions are equal",
                )
            elif got[0] == past:
                hint = _t(
                    f"这是纯文本的位置：图像让位置比词元序号少了 {-delta}（delta = {delta}）",
                    f"that is the text-only position: the image put the positions "
                    f"{-delta} behind the token index (delta = {delta})",
                )
            elif got[0] == prompt.max().item() + 1 and past != T:
                hint = _t(
                    "每个新词元都要往后一格：序号 + delta，delta = 最大位置 + 1 − T",
                    "each new token moves one further: its index + delta, delta = largest "
                    "position + 1 − T",
                )
            elif got[0] == past - delta:
                hint = _t(
                    "delta 的符号反了：delta = 最大位置 + 1 − T，有图像时是负数",
                    "the sign of delta is flipped: delta = largest position + 1 − T, "
                    "negative with an image",
                )
            else:
                hint = _t(
                    f"位置 = 序号 + delta，delta = 最大位置 + 1 − T = {delta}",
                    f"the position = its index + delta, delta = largest position + 1 − T = {delta}",
                )
            return [
                case + _t(f"：应为 {want}，得到 {got[0]}", f": should be {want}, got {got[0]}"),
                hint,
            ]
    return []
