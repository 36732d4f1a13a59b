# The two commands of the README: `make demo` and `make test`. Each sets up .venv if needed,
# builds the extension against the torch it finds, and runs.
VENV ?= .venv
PY := $(VENV)/bin/python
MAX_JOBS ?= $(shell nproc)
export MAX_JOBS

.PHONY: demo test build venv bench sanitize clean

venv:
	@VENV=$(VENV) scripts/setup_venv.sh

# An in-place build (incremental, ninja) plus a .pth entry for python/: the same result as
# `pip install --no-build-isolation -e .` without compiling twice.
build: venv
	$(PY) setup.py -q build_ext --inplace
	@$(PY) -c "import sysconfig, os; open(os.path.join(sysconfig.get_paths()['purelib'], 'mxfuse-dev.pth'), 'w').write(os.path.abspath('python') + '\\n')"

demo: build
	$(PY) -m mxfuse demo

test: build
	$(PY) -m pytest -q tests

bench: build
	$(PY) benchmarks/bench_norm_quant.py
	$(PY) benchmarks/bench_mxfp6_linear.py
	$(PY) benchmarks/bench_layer_front.py
	$(PY) benchmarks/bench_mxfp8_mm.py

# NVIDIA GPU only: compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over every kernel
# family, logs in sanitize_out/ (tests/sanitize/h200_results.md).
sanitize: build
	PY=$(PY) scripts/sanitize.sh

clean:
	rm -rf build python/mxfuse/*.so python/*.egg-info
