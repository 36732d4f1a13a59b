# The two commands of the README: `make demo` and `make test`. Each sets up .venv if needed,
# builds the extension against the torch it finds, and runs.
VENV ?= .venv
PY := $(VENV)/bin/python
MAX_JOBS ?= $(shell nproc)
export MAX_JOBS

.PHONY: demo test build venv bench clean

venv:
	@VENV=$(VENV) scripts/setup_venv.sh

# The editable install registers python/ once; build_ext --inplace then rebuilds incrementally.
build: venv
	@test -f $(VENV)/.mxfuse-editable || { $(PY) -m pip install -q --no-build-isolation --no-deps -e . && touch $(VENV)/.mxfuse-editable; }
	$(PY) setup.py -q build_ext --inplace

demo: build
	$(PY) -m mxfuse demo

test: build
	$(PY) -m pytest -q tests

bench: build
	$(PY) benchmarks/bench_norm_quant.py
	$(PY) benchmarks/bench_mxfp6_linear.py

clean:
	rm -rf build python/mxfuse/*.so python/*.egg-info
