"""Real chat data for chapter 20's fine-tuning: the question/answer pairs of the chatterbot-corpus
wheel (English and Chinese YAML files), with a fixed held-out split.

The corpus is user-contributed dialog collected by Gunther Cox's ChatterBot project
(https://github.com/gunthercox/chatterbot-corpus), distributed on PyPI as chatterbot-corpus under a
BSD licence (its wheel's metadata); the files are read where the wheel put them, chatterbot itself
is not needed.
"""

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

import yaml

PACKAGE = "chatterbot-corpus"
VERSION = "1.3.3"
LANGUAGES = ("english", "chinese")
HELD_OUT = 10  # one question in 10 (by a hash of its text) is held out


def corpus_folder():
    """The data/ folder of the installed wheel; a clear error with the install command if none."""
    spec = importlib.util.find_spec("chatterbot_corpus")  # finds it, imports nothing
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"chapter 20's chat data is the {PACKAGE} wheel: "
            f"pip install {PACKAGE}=={VERSION} (or pip install -e '.[book]')"
        )
    return Path(spec.origin).parent / "data"


def licence():
    """The licence the wheel's metadata states (its trove classifier), e.g. 'BSD License'."""
    meta = importlib.metadata.metadata(PACKAGE)
    found = [
        c.split("::")[-1].strip()
        for c in meta.get_all("Classifier") or []
        if c.startswith("License ::")
    ]
    return meta.get("License-Expression") or meta.get("License") or ", ".join(found) or "unstated"


def credit():
    """One line naming the data, its version, source and licence."""
    version = importlib.metadata.version(PACKAGE)
    return (
        f"{PACKAGE} {version} (github.com/gunthercox/chatterbot-corpus), "
        f"{licence()}, user-contributed dialog"
    )


def pairs(language):
    """(question, answer) pairs of one language, in file order: each conversation's turns taken
    two by two (a turn, then the reply to it)."""
    folder = corpus_folder() / language
    files = sorted(folder.glob("*.yml"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no .yml files: reinstall {PACKAGE}=={VERSION}")
    out = []
    for file in files:
        for turns in yaml.safe_load(file.read_text(encoding="utf-8")).get("conversations", []):
            turns = [str(t).strip() for t in turns]
            out += [(q, a) for q, a in zip(turns[0::2], turns[1::2]) if q and a]
    return out


def held_out(question):
    """True for the questions of the fixed held-out split: chosen by a hash of the text, so the
    split never changes and one question's several answers all fall on the same side."""
    return int(hashlib.sha256(question.encode()).hexdigest(), 16) % HELD_OUT == 0


def load(languages=LANGUAGES):
    """{"train": [...], "held_out": [...]}, each a list of (question, answer, language)."""
    split = {"train": [], "held_out": []}
    for lang in languages:
        for q, a in pairs(lang):
            split["held_out" if held_out(q) else "train"].append((q, a, lang))
    return split
