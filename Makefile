# Everything installs into .venv; `make demo` and `make test` are the README's two commands.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hdp-installed
# Numba kernels compiled ahead of time into ~/.cache/hdp/numba (hdp/pipeline/warmup.py), again when the code changes
WARM   := $(VENV)/.hdp-kernels-cached
# ... and for the test suite into this checkout (tests/conftest.py): `make test` leaves ~/.cache/hdp alone
TEST_NUMBA := $(CURDIR)/.numba-cache
TESTWARM   := $(VENV)/.hdp-test-kernels-cached
OUT    ?= out
TARGET ?= virtual
MODEL  ?= inception_v3

.PHONY: demo test test-slow bench fuzz install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: this build is the CPU one on these machines (an unpinned torch is CUDA, GBs)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,zoo,plot,ray]'
	touch $(STAMP)

$(WARM): $(STAMP) $(wildcard hdp/*.py hdp/*/*.py hdp/*/*/*.py)
	$(BIN)/python -m hdp.pipeline.warmup
	touch $(WARM)

$(TESTWARM): $(STAMP) $(wildcard hdp/*.py hdp/*/*.py hdp/*/*/*.py)
	NUMBA_CACHE_DIR=$(TEST_NUMBA) $(BIN)/python -m hdp.pipeline.warmup
	touch $(TESTWARM)

install: $(STAMP) $(WARM)

## demo: generate a benchmark model, place it on the shipped default target, measure the placement
demo: $(STAMP) $(WARM)
	$(BIN)/hdp zoo $(MODEL) -o $(OUT)/$(MODEL).xml
	$(BIN)/hdp compile $(OUT)/$(MODEL).xml --target $(TARGET) -o $(OUT)/$(MODEL).placed.xml --timings $(OUT)/timings.json
	$(BIN)/hdp show $(OUT)/$(MODEL).placed.xml

test: $(STAMP) $(TESTWARM)
	NUMBA_CACHE_DIR=$(TEST_NUMBA) $(BIN)/python -m pytest

## the slow tests (zoo models end to end); CI runs them after `make test`
test-slow: $(STAMP) $(TESTWARM)
	NUMBA_CACHE_DIR=$(TEST_NUMBA) $(BIN)/python -m pytest -m slow

## fuzz: the long fuzz campaign over every input surface (about 10 minutes, FUZZ_EXAMPLES cases per
## surface); counts go to bench/results/fuzz-<date>.json. `make test` runs a 6-case slice of it.
FUZZ_EXAMPLES ?= 1000
fuzz: $(STAMP)
	HDP_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) HDP_FUZZ_REPORT=bench/results/fuzz-$$(date +%F).json \
		$(BIN)/python -X faulthandler -m pytest tests/test_fuzz.py -o addopts="-p no:cacheprovider" -q

bench: $(STAMP) $(WARM)
	$(BIN)/python -m pytest bench --benchmark-only -o addopts="" -q

clean:
	rm -rf $(VENV) $(OUT) .benchmarks
