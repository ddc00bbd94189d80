"""book/checkpoint.py: a folder is labelled Qwen/Qwen3.5-0.8B only when its weights are the official
files."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from book import checkpoint
from book.checkpoint import OFFICIAL_REVISIONS, identify
from qwen.weights import CheckpointError

OFFICIAL_CONFIG = Path(__file__).parent.parent / "book" / "data" / "qwen3.5-0.8b" / "config.json"
WEIGHTS = "model.safetensors-00001-of-00001.safetensors"
REVISION = sorted(OFFICIAL_REVISIONS)[0]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test hashes into its own cache file, never the project's .cache/."""
    monkeypatch.setattr(checkpoint, "CACHE", tmp_path / "cache" / "sha256.json")


def _weights(file, seed=0):
    """A small real safetensors file; returns its sha256."""
    file.parent.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            "model.language_model.norm.weight": torch.randn(
                8, generator=torch.Generator().manual_seed(seed)
            )
        },
        file,
    )
    return hashlib.sha256(file.read_bytes()).hexdigest()


def _folder(folder, seed=0):
    """A checkpoint in the official layout (the real config.json) with random weights."""
    folder.mkdir(parents=True)
    shutil.copy(OFFICIAL_CONFIG, folder / "config.json")
    return _weights(folder / WEIGHTS, seed)


def _hub_cache(root, repo="models--Qwen--Qwen3.5-0.8B", blob_name=None):
    """The Hugging Face cache layout: snapshots/<rev>/<file> is a link to ../../blobs/<name>."""
    snapshot = root / repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    shutil.copy(OFFICIAL_CONFIG, snapshot / "config.json")
    tmp = root / "weights.tmp"
    sha = _weights(tmp)
    blob = root / repo / "blobs" / (blob_name or sha)
    blob.parent.mkdir(parents=True)
    tmp.rename(blob)
    os.symlink(Path("..") / ".." / "blobs" / blob.name, snapshot / WEIGHTS)
    return snapshot, sha


def test_the_tiny_model_is_labelled_as_such(tiny_model):
    c = identify(tiny_model)
    [weights] = tiny_model.glob("*.safetensors")
    assert c == checkpoint.Checkpoint(
        "tiny test model",
        hashlib.sha256(weights.read_bytes()).hexdigest(),
        official=False,
        tiny=True,
    )


def test_a_folder_in_the_official_layout_is_not_official_by_its_layout(tmp_path):
    sha = _folder(tmp_path / "Qwen3.5-0.8B")  # right name, right config, other weights
    c = identify(tmp_path / "Qwen3.5-0.8B")
    assert c == checkpoint.Checkpoint(
        f"Qwen3.5-0.8B (sha256 {sha[:12]})", sha, official=False, tiny=False
    )


def test_hub_cache_whose_blob_name_is_the_content_hash_is_official(tmp_path):
    snapshot, sha = _hub_cache(tmp_path / "hub")
    c = identify(snapshot)
    assert (c.label, c.sha256, c.official, c.tiny) == ("Qwen/Qwen3.5-0.8B", sha, True, False)


def test_hub_cache_with_the_shared_blob_store_is_official(tmp_path):
    """huggingface_hub's shared store: blobs/<sha256> links on to <cache>/blobs/<2 hex>/<xet
    hash>."""
    snapshot, sha = _hub_cache(tmp_path / "hub")
    blob = snapshot.parent.parent / "blobs" / sha
    store = tmp_path / "hub" / "blobs" / "ab" / ("ab" + "0" * 62)
    store.parent.mkdir(parents=True)
    blob.rename(store)
    os.symlink(Path("..") / ".." / "blobs" / "ab" / store.name, blob)
    c = identify(snapshot)
    assert (c.label, c.sha256, c.official) == ("Qwen/Qwen3.5-0.8B", sha, True)


def test_hub_cache_whose_blob_name_is_not_the_content_hash_is_not_official(tmp_path):
    # the file was changed after download
    snapshot, sha = _hub_cache(tmp_path / "hub", blob_name="0" * 64)
    c = identify(snapshot)
    assert (c.label, c.official) == (f"{REVISION} (sha256 {sha[:12]})", False)


def test_hub_cache_of_another_repository_is_not_official(tmp_path):
    snapshot, sha = _hub_cache(tmp_path / "hub", repo="models--someone--Qwen3.5-0.8B-finetune")
    assert identify(snapshot).official is False


@pytest.mark.parametrize(
    "revision,etag,official",
    [
        (REVISION, None, True),  # what `hf download --local-dir` writes: commit, sha256, time
        (
            REVISION,
            "1" * 64,
            False,
        ),  # the hub named other bytes: the file is not what was downloaded
        ("f" * 40, None, False),  # a revision we do not know to be Qwen/Qwen3.5-0.8B's
    ],
)
def test_local_dir_download_metadata(tmp_path, revision, etag, official):
    # the hub client's own writer
    local_folder = pytest.importorskip("huggingface_hub._local_folder")
    sha = _folder(tmp_path / "local")
    local_folder.write_download_metadata(tmp_path / "local", WEIGHTS, revision, etag or sha)
    assert (
        tmp_path / "local" / ".cache" / "huggingface" / "download" / f"{WEIGHTS}.metadata"
    ).is_file()
    c = identify(tmp_path / "local")
    assert (c.official, c.label) == (
        official,
        "Qwen/Qwen3.5-0.8B" if official else f"local (sha256 {sha[:12]})",
    )


def test_a_pinned_sha256_is_official(tmp_path, monkeypatch):
    sha = _folder(tmp_path / "weights")
    pinned = tmp_path / "weights.sha256"
    pinned.write_text(f"# comment\n{sha}  {WEIGHTS}\n")
    monkeypatch.setattr(checkpoint, "PINNED", pinned)
    assert identify(tmp_path / "weights").label == "Qwen/Qwen3.5-0.8B"


def test_every_file_must_be_official(tmp_path, monkeypatch):
    sha = _folder(tmp_path / "two")
    other = _weights(tmp_path / "two" / "extra.safetensors", seed=1)
    pinned = tmp_path / "weights.sha256"
    pinned.write_text(f"{sha}  {WEIGHTS}\n")
    monkeypatch.setattr(checkpoint, "PINNED", pinned)
    c = identify(tmp_path / "two")
    listing = f"{other}  extra.safetensors\n{sha}  {WEIGHTS}\n"
    assert c.sha256 == hashlib.sha256(listing.encode()).hexdigest()  # the sha256sum listing's
    assert (c.official, c.label) == (False, f"two (sha256 {c.sha256[:12]})")


def test_the_shipped_list_is_empty_and_says_who_fills_it():
    text = checkpoint.PINNED.read_text()
    assert checkpoint.pinned_sha256() == set()
    assert ".github/workflows/official-weights.yml" in text


def test_a_file_is_hashed_once_until_it_changes(tmp_path, monkeypatch):
    _folder(tmp_path / "c")
    hashed = []
    real = checkpoint._hash
    monkeypatch.setattr(checkpoint, "_hash", lambda f: hashed.append(f) or real(f))
    first = identify(tmp_path / "c")
    assert identify(tmp_path / "c") == first and len(hashed) == 1  # the second run reads the cache
    cache = json.loads(checkpoint.CACHE.read_text())
    assert list(cache) == [str((tmp_path / "c" / WEIGHTS).resolve())]
    new_sha = _weights(tmp_path / "c" / WEIGHTS, seed=2)  # new content, size, mtime
    assert identify(tmp_path / "c").sha256 == new_sha and len(hashed) == 2


def test_no_weights_is_an_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="No \\*.safetensors files in"):
        identify(tmp_path)


def test_the_command_prints_the_line_to_pin(tmp_path, capsys):
    snapshot, sha = _hub_cache(tmp_path / "hub")
    assert checkpoint.main([str(snapshot)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{snapshot}: Qwen/Qwen3.5-0.8B, sha256 {sha} (official weights)",
        "add these lines to book/data/qwen3.5-0.8b/weights.sha256:",
        f"{sha}  {WEIGHTS}",
    ]


def test_the_command_fails_on_weights_that_are_not_official(tmp_path, capsys):
    sha = _folder(tmp_path / "Qwen3.5-0.8B")
    assert checkpoint.main(["--official", str(tmp_path / "Qwen3.5-0.8B")]) == 1
    out, err = capsys.readouterr()
    assert out == f"{tmp_path / 'Qwen3.5-0.8B'}: Qwen3.5-0.8B (sha256 {sha[:12]}), sha256 {sha}\n"
    assert err == (
        f"error: {tmp_path / 'Qwen3.5-0.8B'} does not hold the official Qwen/Qwen3.5-0.8B weights: "
        "its sha256 is neither pinned in book/data/qwen3.5-0.8b/weights.sha256 nor the one the "
        "hub named when it was downloaded\n"
    )
