"""Which checkpoint a folder holds, by what its weights are: the tiny test model, the official
Qwen/Qwen3.5-0.8B weights (every *.safetensors file's sha256 proven to be the official one), or
another checkpoint, named by its folder and sha256.

    python -m book.checkpoint models/Qwen3.5-0.8B               # its label, and the line to pin if
                                                                # it is new
    python -m book.checkpoint --official models/Qwen3.5-0.8B    # fail unless it holds the official
                                                                # weights

A file is official when its sha256 is pinned in book/data/qwen3.5-0.8b/weights.sha256, or when it is
the LFS object that the Hugging Face hub itself named for Qwen/Qwen3.5-0.8B: in the hub cache
(snapshots/<rev>/<file> links to blobs/<sha256>) or in a `hf download --local-dir` folder
(.cache/huggingface/download/<file>.metadata holds the commit and the sha256). Either way the file's
own sha256 is computed and must match. Digests are cached in .cache/sha256.json by (path, size,
mtime), so a 1.75 GB file is read once.
"""

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from qwen.weights import REPO_ID, CheckpointError, read_json

ROOT = Path(__file__).resolve().parent.parent
PINNED = ROOT / "book" / "data" / "qwen3.5-0.8b" / "weights.sha256"
CACHE = ROOT / ".cache" / "sha256.json"
HUB_FOLDER = f"models--{REPO_ID.replace('/', '--')}"  # the hub cache's folder for the repository
# revisions of Qwen/Qwen3.5-0.8B whose local-dir download metadata we trust (the workflow downloads
# this one)
OFFICIAL_REVISIONS = {"2fc06364715b967f1860aea9cf38778875588b17"}
TINY = "tiny test model"
SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Checkpoint:
    label: str  # "tiny test model", "Qwen/Qwen3.5-0.8B", or "<folder> (sha256 <12 hex>)"
    sha256: str  # of the one weights file; of the sorted `sha256sum` listing when there are several
    official: bool
    tiny: bool


def identify(folder):
    """What the checkpoint in `folder` is, decided by its files' sha256, never by a flag in them."""
    from book.tiny import is_tiny  # book.tiny builds the model this compares with

    folder = Path(folder)
    read_json(folder / "config.json")  # a missing or broken config is named first
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"No *.safetensors files in {folder}")
    digests = {f.name: file_sha256(f) for f in files}
    listing = "".join(f"{d}  {name}\n" for name, d in digests.items())
    sha = (
        digests[files[0].name] if len(files) == 1 else hashlib.sha256(listing.encode()).hexdigest()
    )
    # the tiny model by its bytes: a config that says book_tiny_test_model proves nothing
    if is_tiny(folder):
        return Checkpoint(TINY, sha, official=False, tiny=True)
    pinned = pinned_sha256()
    official = all(digests[f.name] in pinned or digests[f.name] == hub_sha256(f) for f in files)
    label = REPO_ID if official else f"{folder.resolve().name} (sha256 {sha[:12]})"
    return Checkpoint(label, sha, official=official, tiny=False)


def pinned_sha256():
    """The official files' sha256 listed in book/data/qwen3.5-0.8b/weights.sha256 (sha256sum
    format)."""
    lines = PINNED.read_text().splitlines() if PINNED.is_file() else []
    return {line.split()[0].lower() for line in lines if line.strip() and not line.startswith("#")}


def hub_sha256(file):
    """The sha256 the Hugging Face hub gave for `file` as part of Qwen/Qwen3.5-0.8B, or None if it
    gave none."""
    file = Path(file)
    snapshot = file.parent.resolve()
    # the hub cache: <cache>/models--Qwen--Qwen3.5-0.8B/snapshots/<rev>/<file> ->
    # ../../blobs/<sha256> (that blob may itself link on into the cache's shared store, named by
    # another hash: follow one link only)
    if (
        file.is_symlink()
        and snapshot.parent.name == "snapshots"
        and snapshot.parent.parent.name == HUB_FOLDER
    ):
        blob = Path(os.path.normpath(snapshot / os.readlink(file)))
        if blob.parent.resolve() == snapshot.parent.parent / "blobs" and SHA256.fullmatch(
            blob.name
        ):
            return blob.name
    # `hf download --local-dir`: .cache/huggingface/download/<file>.metadata = commit, etag (the
    # sha256), time
    meta = file.parent / ".cache" / "huggingface" / "download" / f"{file.name}.metadata"
    if meta.is_file():
        lines = meta.read_text(errors="replace").splitlines()
        if (
            len(lines) >= 2
            and lines[0].strip() in OFFICIAL_REVISIONS
            and SHA256.fullmatch(lines[1].strip())
        ):
            return lines[1].strip()
    return None


def file_sha256(file):
    """The sha256 of `file`, computed once: the cache in .cache/ is keyed by (path, size, mtime)."""
    file = Path(file).resolve()
    stat = file.stat()
    key, stamp = str(file), [stat.st_size, stat.st_mtime_ns]
    cached = _read_cache().get(key)
    if isinstance(cached, list) and cached[:2] == stamp:
        return cached[2]
    digest = _hash(file)
    # re-read (another process may have added some), forget files that are gone, add this one
    cache = {k: v for k, v in _read_cache().items() if os.path.exists(k)}
    cache[key] = [*stamp, digest]
    _write_cache(cache)
    return digest


def _hash(file):
    h = hashlib.sha256()
    with open(file, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _read_cache():
    try:
        return json.loads(CACHE.read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(cache):
    """Atomically: a reader sees the old cache or the new one. A read-only .cache/ only costs the
    next run a hash."""
    tmp = None
    try:
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=CACHE.parent, prefix=".sha256.")
        with os.fdopen(fd, "w") as fh:
            json.dump(cache, fh, indent=1, sort_keys=True)
        os.replace(tmp, CACHE)
    except OSError:
        pass
    finally:
        if tmp and os.path.exists(tmp):
            os.remove(tmp)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Say which checkpoint each folder holds.")
    ap.add_argument("folders", nargs="*", type=Path, default=[Path("models/Qwen3.5-0.8B")])
    ap.add_argument(
        "--official",
        action="store_true",
        help="fail unless every folder holds the official weights",
    )
    args = ap.parse_args(argv)
    for folder in args.folders:
        try:
            c = identify(folder)
        except CheckpointError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(
            f"{folder}: {c.label}, sha256 {c.sha256}"
            + (" (official weights)" if c.official else "")
        )
        if args.official and not c.official:
            print(
                f"error: {folder} does not hold the official {REPO_ID} weights: its sha256 is "
                f"neither pinned in {PINNED.relative_to(ROOT)} nor the one the hub named when it "
                "was downloaded",
                file=sys.stderr,
            )
            return 1
        pinned = pinned_sha256()
        missing = [f for f in sorted(folder.glob("*.safetensors")) if file_sha256(f) not in pinned]
        if c.official and missing:  # vouched for by the hub's download record, not pinned yet
            print(f"add these lines to {PINNED.relative_to(ROOT)}:")
            for f in missing:
                print(f"{file_sha256(f)}  {f.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
