"""Shared fixtures: the real Qwen3.5 tokenizer, built once per test session."""
import pytest


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory):
    """Path of the rebuilt tokenizer.json: the tiny test model's copy if book.tiny exists, else a fresh build."""
    try:
        from book.tiny import path as tiny_path
    except ImportError:
        from book.tokenizer import build_tokenizer_json
        return build_tokenizer_json(tmp_path_factory.mktemp("tokenizer") / "tokenizer.json")
    return tiny_path() / "tokenizer.json"


@pytest.fixture(scope="session")
def tokenizer(tokenizer_json):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(tokenizer_json))


@pytest.fixture(scope="session")
def tiny_model():
    """The tiny test model's folder (built once, cached under .cache/)."""
    from book.tiny import path
    return path()
