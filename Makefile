# DevAssist: `make run` to try it, `make test` for the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# make run uses the embedded defaults (SQLite under var/, in-memory channel layer) unless
# DATABASE_URL / REDIS_URL are set in the environment.
RUN_ENV := DEBUG=$${DEBUG:-1}
# The test suite runs on PostgreSQL; point TEST_DATABASE_URL elsewhere if needed.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/devassist
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
# torch is installed before the project: sentence-transformers (the local-embeddings extra, part
# of dev) needs it, and left to itself pip takes the CUDA build, several GB. 2.13.0 resolves to
# the CPU wheel in this machine's wheelhouse (pip.conf find-links); elsewhere, for example:
# make install TORCH_SPEC='torch --index-url https://download.pytorch.org/whl/cpu'
TORCH_SPEC ?= torch==2.13.0

.PHONY: run test lint format typecheck install clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

run: $(BIN)/.installed
	$(RUN_ENV) $(BIN)/python manage.py migrate --noinput
	$(RUN_ENV) $(BIN)/python manage.py ensure_demo_user
	@# The project's own documentation, searchable at once (unchanged files are skipped).
	$(RUN_ENV) $(BIN)/python manage.py ingest_docs README.md docs --collection devassist_docs \
		|| echo "warning: the sample docs were not ingested (see above; after switching embeddings: manage.py ingest_docs README.md docs --rebuild)"
	@# Code execution needs the sandbox image; without a Docker engine DevAssist runs without it.
	$(RUN_ENV) $(BIN)/python manage.py sandbox_image build \
		|| echo "warning: no sandbox image, code execution is unavailable (see docs/sandbox-image.md)"
	@echo "DevAssist on http://$(HOST):$(PORT)/ (Ctrl+C stops it)"
	$(RUN_ENV) $(BIN)/daphne -b $(HOST) -p $(PORT) devassist.asgi:application

test: $(BIN)/.installed
	TEST_DATABASE_URL=$(TEST_DATABASE_URL) TEST_REDIS_URL=$(TEST_REDIS_URL) $(BIN)/pytest $(PYTEST_ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

format: $(BIN)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
