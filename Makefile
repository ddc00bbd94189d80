# The two set-up commands of the README: `make serve` (read the book) and `make test-all` (run every test).
# `make test` is the fast tier for every change (minutes); `make test-all` is what CI runs.
# Both start from nothing: they make .venv, install PyTorch first, then the project.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip -q --disable-pip-version-check
TORCH  ?= torch==2.13.0
# PyTorch's CPU build by default (about 200 MB): from PyPI, Linux gets the CUDA build, about 20 nvidia packages and
# several GB that a reader without a GPU does not need. Where the CPU index cannot be reached (only PyPI), PyPI's
# build is installed instead, and make says so. With a GPU: make serve TORCH_INDEX=  (PyPI's CUDA build).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_URL := $(patsubst --index-url=%,%,$(TORCH_INDEX))

.PHONY: serve test test-all lint format regen check clean

$(VENV)/.book: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	@if [ -z "$(TORCH_URL)" ]; then $(PIP) install "$(TORCH)"; \
	else echo "installing $(TORCH) (CPU build) from $(TORCH_URL)"; \
	  $(PIP) install "$(TORCH)" --index-url "$(TORCH_URL)" --retries 1 --timeout 30 || { \
	  echo "make: $(TORCH_URL) cannot be reached; installing $(TORCH) from PyPI instead (on Linux: the CUDA build)" >&2; \
	  $(PIP) install "$(TORCH)"; }; fi
	$(PIP) install -c constraints.txt -e ".[book]"
	touch $@

$(VENV)/.test: $(VENV)/.book
	$(PIP) install -c constraints.txt -e ".[book,test]"
	touch $@

serve: $(VENV)/.book                 ## the book at http://127.0.0.1:8000, reloading when docs/, qwen/, scripts/ change
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --livereload

lint: $(VENV)/.test                  ## ruff: the rules and the format (100 columns; see pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.test
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: lint                           ## the fast tier: library, parity, loaders, messages, exercises' checks, static page checks
	HF_HUB_OFFLINE=1 NO_MKDOCS_2_WARNING=1 $(PY) -m pytest -m "not slow and not browser" --durations=10

# test-all: one pytest worker per core (pytest-xdist), each test file on one worker, the longest files first
test-all: lint                       ## every test: the fast tier, then outputs --check, code blocks, site build, notebooks, lessons, browser
	HF_HUB_OFFLINE=1 NO_MKDOCS_2_WARNING=1 $(PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=10

regen: $(VENV)/.test                 ## rerun every chapter script (and the parity report: needs transformers), rewrite docs/outputs, docs/figures, then the chapter notebooks
	HF_HUB_OFFLINE=1 $(PY) -m book.regen
	$(PY) -m book.notebooks

check: $(VENV)/.test
	HF_HUB_OFFLINE=1 $(PY) -m book.regen --check
	$(PY) -m book.notebooks --check

clean:
	rm -rf $(VENV) site .cache
