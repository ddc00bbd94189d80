"""The model with eyes: image features in place of the image tokens, M-RoPE positions, one text
model."""
# --8<-- [start:imports]
from pathlib import Path

import torch
import torch.nn as nn

from qwen.chat import Chat, content, opening, plain_ids
from qwen.checks import check_id_tensor
from qwen.image import ImageConfig, open_image, preprocess
from qwen.mrope import MRotaryEmbedding, rope_index
from qwen.vision import vision_from_pretrained
from qwen.weights import CheckpointError, read_json

# --8<-- [end:imports]


# --8<-- [start:model]
class QwenVL(nn.Module):
    """Token ids and Images in, next-token logits out; the text model is chapter 9's, unchanged."""

    def __init__(self, text, visual, tokens, sections):
        super().__init__()
        self.text, self.visual = text, visual                  # qwen.model.Qwen, VisionModel
        self.tokens = tokens                                   # vision_start, image_pad, vision_end
        c = text.cfg
        self.mrope = MRotaryEmbedding(c.head_dim, c.partial_rotary_factor, c.rope_theta, sections)

    @property
    def cfg(self):
        return self.text.cfg

    @property
    def embed_tokens(self):
        return self.text.embed_tokens

    def new_cache(self, batch=1, max_tokens=None):
        return self.text.new_cache(batch, max_tokens)

    def forward(self, ids, cache=None, last_only=False, images=None):
        """Logits [B, T, vocab]; images (qwen.image.Images) fill the prompt's image tokens."""
        check_id_tensor(ids, self.cfg.vocab_size)
        x = self.text.embed_tokens(ids)                        # [B, T, dim]
        pad = ids == self.tokens["image_pad"]
        past = 0 if cache is None else cache.seq_len
        if images is not None or (past == 0 and pad.any()):   # a prompt's image tokens
            x = place(x, pad, self.see(images))
        if past == 0:                                          # the prompt: positions from ids
            grid = images.grid if images is not None else torch.zeros(0, 3, dtype=torch.long)
            positions, deltas = rope_index(ids.cpu(), grid, self.tokens["image_pad"],
                                           self.visual.cfg.spatial_merge_size)
            if cache is not None:
                cache.rope_deltas = deltas                     # for the tokens that follow
        else:                                                  # after it: text, shifted
            steps = torch.arange(past, past + ids.shape[1])
            deltas = torch.tensor(getattr(cache, "rope_deltas", [0] * ids.shape[0]))
            positions = (steps + deltas[:, None]).expand(3, -1, -1)
        cos, sin = self.mrope(positions.to(ids.device))        # [B, T, rotated dims]
        cos, sin = cos[:, None], sin[:, None]                  # [B, 1, T, .]: over the heads
        for i, layer in enumerate(self.text.layers):
            x = layer(x, cos, sin, None if cache is None else cache.layers[i])
        if cache is not None:
            cache.seq_len += ids.shape[1]
        if last_only:
            x = x[:, -1:]
        return self.text.lm_head(self.text.norm(x))

    def see(self, images):
        """The vision tower's tokens for `images`: [tokens of all images, text width]."""
        if images is None:
            raise ValueError("the prompt has image tokens but no images were given")
        return self.visual(images.pixels, images.grid.cpu())


def place(x, pad, features):
    """x [B, T, dim] with the image tokens' rows replaced by the images' features, in order."""
    n = int(pad.sum())
    if n != features.shape[0]:
        raise ValueError(f"the prompt has {n} image tokens but the images make "
                         f"{features.shape[0]}: build the prompt with qwen.vlm.image_ids")
    return x.masked_scatter(pad[..., None], features.to(x.dtype))
# --8<-- [end:model]


# --8<-- [start:prompted]
class WithImages(nn.Module):
    """A QwenVL whose first call (the prompt) sees `images`; later calls are plain decode steps.
    Anything that drives a text model (qwen.generate.generate) can drive it."""

    def __init__(self, model, images):
        super().__init__()
        self.model, self.images = model, images
        self.cfg, self.embed_tokens = model.cfg, model.embed_tokens

    def new_cache(self, batch=1, max_tokens=None):
        return self.model.new_cache(batch, max_tokens)

    def forward(self, ids, cache=None, last_only=False):
        first = cache is None or cache.seq_len == 0
        return self.model(ids, cache, last_only, self.images if first else None)
# --8<-- [end:prompted]


# --8<-- [start:chat]
def image_ids(tokens, n):
    """What one image is in the prompt: <|vision_start|>, n <|image_pad|>, <|vision_end|>."""
    return [tokens["vision_start"], *[tokens["image_pad"]] * n, tokens["vision_end"]]


def image_chat_ids(tokenizer, messages, tokens, thinking=False):
    """chat_ids (chapter 12) for turns that may carry images: a turn's "images" (tokens per
    image) come first in it, then its text, as the official template places them."""
    ids = []
    for m in messages:
        ids += tokenizer.encode(f"<|im_start|>{m['role']}\n").ids
        for n in m.get("images", ()):
            ids += image_ids(tokens, n)
        ids += plain_ids(tokenizer, content(m))
        ids += tokenizer.encode("<|im_end|>\n").ids
    return ids + tokenizer.encode(opening(thinking)).ids


class ImageChat(Chat):
    """Chapter 12's conversation whose user turns may carry images (given as tokens per image)."""

    def ask(self, text, images=()):
        self.messages.append({"role": "user", "content": text, "images": list(images)})

    def ids(self, tokenizer, tokens):
        """The whole prompt as token ids, every image's run of <|image_pad|> in its turn."""
        return image_chat_ids(tokenizer, self.messages, tokens, self.thinking)
# --8<-- [end:chat]


# --8<-- [start:from_pretrained]
TOKENS = {"vision_start": "vision_start_token_id", "image_pad": "image_token_id",
          "vision_end": "vision_end_token_id"}


def vision_tokens(path):
    """The ids of the three vision tokens, from config.json."""
    raw = read_json(Path(path) / "config.json")
    missing = [key for key in TOKENS.values() if not isinstance(raw.get(key), int)]
    if missing:
        raise CheckpointError(f"{Path(path) / 'config.json'} has no {', '.join(missing)}: "
                              "a text-only config; use the full Qwen/Qwen3.5-0.8B checkpoint")
    return {name: raw[key] for name, key in TOKENS.items()}


def mrope_sections(path):
    """text_config.rope_parameters.mrope_section: [11, 11, 10] in Qwen3.5, interleaved."""
    raw = read_json(Path(path) / "config.json")
    rope = raw.get("text_config", raw).get("rope_parameters") or {}
    if not rope.get("mrope_interleaved", True):
        raise CheckpointError(f"{Path(path) / 'config.json'}: mrope_interleaved false is "
                              "Qwen2-VL's layout, not supported (Qwen3.5 interleaves)")
    return rope.get("mrope_section", [11, 11, 10])


def from_pretrained(path, text, dtype=torch.float32, device="cpu"):
    """QwenVL of the checkpoint folder `path` around the text model `text` (clear or fast)."""
    tokens, sections = vision_tokens(path), mrope_sections(path)   # refused before any read
    visual = vision_from_pretrained(path, dtype, device)
    return QwenVL(text, visual, tokens, sections).to(device)


def read_images(files, path):
    """The image files, opened and checked (qwen.image.open_image), as one Images."""
    return preprocess([open_image(f) for f in files], ImageConfig.load(path))
# --8<-- [end:from_pretrained]
