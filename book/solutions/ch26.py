"""Solutions to chapter 26's exercises (book/exercises/ch26.py checks them); the page shows each in
a collapsed block, included from the named sections below."""

# fmt: off
import math


# --8<-- [start:ch26_tokens]
def tokens(height, width, patch, merge, min_pixels, max_pixels):
    """一张图在提示词里占几个 <|image_pad|> / how many pads an image takes."""
    f = patch * merge                                      # a token covers f x f pixels
    h, w = round(height / f) * f, round(width / f) * f     # the nearest multiples
    if h * w > max_pixels:                                 # shrink both sides by one beta
        beta = math.sqrt(height * width / max_pixels)
        h = max(f, math.floor(height / beta / f) * f)
        w = max(f, math.floor(width / beta / f) * f)
    elif h * w < min_pixels:                               # grow both sides by one beta
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / f) * f
        w = math.ceil(width * beta / f) * f
    return (h // patch) * (w // patch) // merge**2         # patches, 2 x 2 to a token
# --8<-- [end:ch26_tokens]


# --8<-- [start:ch26_place]
def place(x, ids, pad, features):
    """x [B, T, dim] 的 pad 行换成 features / the pads' rows replaced by the features."""
    mask = ids == pad                                      # [B, T], read in [B, T] order
    if int(mask.sum()) != features.shape[0]:
        raise ValueError(f"{int(mask.sum())} pads but {features.shape[0]} feature rows")
    out = x.clone()                                        # the embeddings stay as they were
    out[mask] = features.to(x.dtype)                       # row k of features -> k-th pad
    return out
# --8<-- [end:ch26_place]
