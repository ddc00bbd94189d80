"""Pixels to patches: a picture becomes rows of 2 x 16 x 16 x 3 numbers in the merger's order."""
# --8<-- [start:imports]
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from qwen.weights import CheckpointError, read_json

# --8<-- [end:imports]


# --8<-- [start:config]
@dataclass
class ImageConfig:
    """preprocessor_config.json: the pixel budget, the patch sizes, the mean and std."""
    min_pixels: int = 65536                  # size.shortest_edge: 256 x 256 at the least
    max_pixels: int = 16777216               # size.longest_edge: 4096 x 4096 at the most
    patch_size: int = 16
    temporal_patch_size: int = 2             # a still image is shown as 2 equal frames
    merge_size: int = 2                      # 2 x 2 patches become one token of the text
    image_mean: tuple = (0.5, 0.5, 0.5)
    image_std: tuple = (0.5, 0.5, 0.5)

    @classmethod
    def load(cls, path):
        file = Path(path) / "preprocessor_config.json"
        if not file.is_file():
            raise CheckpointError(f"{file} is missing: it says how images are cut into patches; "
                                  "download the checkpoint again (all of its files)")
        raw = read_json(file)
        size = raw.get("size") or {}
        cfg = cls(min_pixels=size.get("shortest_edge", raw.get("min_pixels", cls.min_pixels)),
                  max_pixels=size.get("longest_edge", raw.get("max_pixels", cls.max_pixels)),
                  **{k: raw[k] for k in ("patch_size", "temporal_patch_size", "merge_size")
                     if k in raw},
                  **{k: tuple(raw[k]) for k in ("image_mean", "image_std") if k in raw})
        check_image_config(file, cfg)
        return cfg

    @property
    def factor(self):
        """Both sides of a resized image are multiples of this: 16 * 2 = 32 pixels."""
        return self.patch_size * self.merge_size
# --8<-- [end:config]


def check_image_config(file, cfg):
    """Refuse sizes that would make no patches, or a mean/std that is not one number a channel."""
    for name in ("min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CheckpointError(f"{file}: {name} is {value!r}, not a whole number >= 1: "
                                  "download the file again")
    if cfg.min_pixels > cfg.max_pixels:
        raise CheckpointError(f"{file}: shortest_edge {cfg.min_pixels} > longest_edge "
                              f"{cfg.max_pixels}: download the file again")
    for name in ("image_mean", "image_std"):
        value = getattr(cfg, name)
        if len(value) != 3 or not all(isinstance(v, (int, float)) for v in value):
            raise CheckpointError(f"{file}: {name} is {list(value)}, not 3 numbers: "
                                  "download the file again")
    if not all(v > 0 for v in cfg.image_std):
        raise CheckpointError(f"{file}: image_std {list(cfg.image_std)} must be > 0")


# --8<-- [start:smart_resize]
def smart_resize(height, width, factor=32, min_pixels=65536, max_pixels=16777216):
    """The size an image is resized to: both sides multiples of `factor`, the area within
    [min_pixels, max_pixels], the aspect ratio kept as well as rounding allows."""
    if max(height, width) > 200 * min(height, width):
        raise ValueError(f"an image of {width} x {height} pixels is more than 200 times longer "
                         "than it is wide: crop it first")
    h, w = round(height / factor) * factor, round(width / factor) * factor   # nearest multiples
    if h * w > max_pixels:                   # too big: shrink both sides by one factor beta
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:                 # too small: grow both sides
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w
# --8<-- [end:smart_resize]


# --8<-- [start:patches]
def to_patches(pixels, cfg):
    """[3, H, W] normalized pixels -> [h * w, 3 * 2 * 16 * 16] patch rows and the grid (1, h, w).
    Rows come 2 x 2 block by block (the merger's order), not row by row."""
    C, H, W = pixels.shape
    p, m, t = cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size
    h, w = H // p, W // p                                     # patches down and across
    x = pixels.reshape(C, h // m, m, p, w // m, m, p)         # [C, bh, m, p, bw, m, p]
    x = x.permute(1, 4, 2, 5, 0, 3, 6)                        # [bh, bw, m, m, C, p, p]
    x = x.unsqueeze(5).expand(*x.shape[:5], t, p, p)          # the still image, t frames
    return x.reshape(h * w, C * t * p * p), (1, h, w)         # a row: [C][t][p][p]
# --8<-- [end:patches]


# --8<-- [start:preprocess]
@dataclass
class Images:
    """The vision tower's input: every image's patch rows, one after another, and their grids."""
    pixels: torch.Tensor                     # [patches of all images, 3 * 2 * 16 * 16]
    grid: torch.Tensor                       # [images, 3]: (t, h, w) in patches

    def tokens(self, merge_size=2):
        """How many tokens of the text each image becomes: t * h * w / 4."""
        return [t * h * w // merge_size**2 for t, h, w in self.grid.tolist()]


def preprocess(images, cfg):
    """PIL images (RGB) -> Images: resize, scale to [0, 1], normalize, cut into patches."""
    from PIL import Image

    rows, grids = [], []
    for image in images:
        H, W = smart_resize(image.height, image.width, cfg.factor, cfg.min_pixels,
                            cfg.max_pixels)
        image = image.resize((W, H), Image.Resampling.BICUBIC)    # PIL: width first
        x = torch.from_numpy(np.asarray(image, dtype=np.float32)).permute(2, 0, 1) / 255
        mean = torch.tensor(cfg.image_mean).view(3, 1, 1)
        std = torch.tensor(cfg.image_std).view(3, 1, 1)
        patches, grid = to_patches((x - mean) / std, cfg)       # [-1, 1] with mean = std = 0.5
        rows.append(patches)
        grids.append(grid)
    return Images(torch.cat(rows), torch.tensor(grids))
# --8<-- [end:preprocess]


# --8<-- [start:open_image]
MAX_MEGAPIXELS = 40                          # decoding more would take gigabytes before resizing


def open_image(path):
    """The image file at `path` as an RGB PIL image; a file that is not one still image is a
    ValueError that says what it is and what to do."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        what = "a folder" if path.is_dir() else "no such file"
        raise ValueError(f"{path}: {what}; give the path of an image file (PNG, JPEG, ...)")
    if path.stat().st_size == 0:
        raise ValueError(f"{path} is empty (0 bytes): not an image")
    try:
        image = Image.open(path)
        pixels = image.width * image.height
        if pixels > MAX_MEGAPIXELS * 1_000_000:
            raise ValueError(f"{path} is {image.width} x {image.height} = {pixels / 1e6:.1f} "
                             f"megapixels; the limit is {MAX_MEGAPIXELS}: shrink it first "
                             "(the model sees at most 16.8 megapixels anyway)")
        if getattr(image, "n_frames", 1) > 1:
            raise ValueError(f"{path} is animated ({image.n_frames} frames): save the frame "
                             "you mean as a still image")
        image.load()                         # decode now: a truncated file fails here
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError) as e:
        raise ValueError(f"{path} is not an image PIL can read ({e}): "
                         "is it damaged, or another kind of file?") from None
    return to_rgb(ImageOps.exif_transpose(image))
# --8<-- [end:open_image]


def to_rgb(image):
    """Three channels, as the processor makes them: transparency laid over white; CMYK, gray or
    a palette converted."""
    from PIL import Image

    if "A" in image.getbands() or image.info.get("transparency") is not None:
        image = image.convert("RGBA")
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, image).convert("RGB")
    return image.convert("RGB")
