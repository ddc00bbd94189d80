# The two set-up commands of the README: `make serve` (read the book) and `make test` (run every test).
# Both start from nothing: they make .venv, install the CPU build of PyTorch first, then the project.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip -q --disable-pip-version-check
TORCH  ?= torch==2.13.0
# Readers elsewhere can get the small CPU wheel with: make serve TORCH_INDEX=--index-url=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

.PHONY: serve test regen check clean

$(VENV)/.book: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install "$(TORCH)" $(TORCH_INDEX)
	$(PIP) install -c constraints.txt -e ".[book]"
	touch $@

$(VENV)/.test: $(VENV)/.book
	$(PIP) install -c constraints.txt -e ".[book,test]"
	touch $@

serve: $(VENV)/.book                 ## the book at http://127.0.0.1:8000, reloading when docs/, qwen/, scripts/ change
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --livereload

test: $(VENV)/.test                  ## every test: library, parity, outputs --check, code blocks, strict build, lessons
	HF_HUB_OFFLINE=1 NO_MKDOCS_2_WARNING=1 $(PY) -m pytest

regen: $(VENV)/.test                 ## rerun every chapter script (and the parity report: needs transformers) and rewrite docs/outputs, docs/figures
	HF_HUB_OFFLINE=1 $(PY) -m book.regen

check: $(VENV)/.test
	HF_HUB_OFFLINE=1 $(PY) -m book.regen --check

clean:
	rm -rf $(VENV) site .cache
