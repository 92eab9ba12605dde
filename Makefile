# tftrace — every target is safe to re-run; nothing is redone when nothing changed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SETUP_STAMP  := $(VENV)/.setup-done
MODELS_DIR   := sample_models/generated
MODELS_STAMP := $(MODELS_DIR)/.complete
OUT    ?= out/demo
PYTEST_ARGS ?=
# A second TensorFlow for --python / --a-python / --b-python and diagnose --other-python (issue 28):
# 2.12.1 is the oldest tensorflow-cpu that installs for Python 3.11. `make other-tf TF=2.17.1` makes another.
TF        ?= 2.12.1
TF_MINOR  := $(word 1,$(subst ., ,$(TF))).$(word 2,$(subst ., ,$(TF)))
OTHER_VENV := .venv-tf$(TF_MINOR)
OTHER_STAMP := $(OTHER_VENV)/.setup-done-$(TF)
# what tftrace's child imports there (tracer/pythons.py's CHILD_PACKAGES); numpy is TensorFlow's pin
CHILD_PACKAGES := numpy networkx xxhash zstandard

# tf-keras, for the tf-slim tests (tests/fixtures/slim_training.py): slim.batch_norm builds
# tf.compat.v1.layers.BatchNormalization, which TensorFlow imports from tf_keras (from a module path
# the wheel ships under tf_keras.src: the fixture aliases it, as a tf-slim user on TF 2.21 must).
# Its wheel requires `tensorflow`, the full package, which pip would install over tensorflow-cpu
# (or over a user's own build), so it is installed without dependencies, at the release of the cpu
# extra's TensorFlow.
TF_KERAS := 2.21.0
TF_KERAS_STAMP := $(VENV)/.tf-keras-$(TF_KERAS)-serving-api
# tensorflow-serving-api, whose protos the warmup-request tests write their files with, as TF
# Serving's users do (tests/test_warmup_requests.py); it too requires the full `tensorflow`.
TF_SERVING_API := 2.21.0

.PHONY: setup system-deps models demo test test-fast bench clean other-tf

setup: $(SETUP_STAMP) $(TF_KERAS_STAMP) system-deps

$(SETUP_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,dev]'
	@touch $@

$(TF_KERAS_STAMP): $(SETUP_STAMP)
	$(BIN)/python -m pip install --quiet --no-deps 'tf-keras==$(TF_KERAS)' 'tensorflow-serving-api==$(TF_SERVING_API)'
	@touch $@

# Graphviz's `dot` renders the report graph; Debian's chromium runs the browser tests.
system-deps:
	@missing=""; \
	command -v dot >/dev/null 2>&1 || missing="$$missing graphviz"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing$$missing (Debian packages)"; \
	    (apt-get install -y -q $$missing >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null)); \
	  else \
	    echo "missing system packages:$$missing — install them with: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

# Cached like .venv: nothing is downloaded again once the stamp of that release is there.
other-tf: $(OTHER_STAMP)

$(OTHER_STAMP):
	@test -x $(OTHER_VENV)/bin/python || $(PYTHON) -m venv $(OTHER_VENV)
	$(OTHER_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OTHER_VENV)/bin/python -m pip install --quiet 'tensorflow-cpu==$(TF)' $(CHILD_PACKAGES)
	@touch $@
	@echo "$(OTHER_VENV)/bin/python: TensorFlow $(TF) for --python"

models: $(MODELS_STAMP)

$(MODELS_STAMP): $(SETUP_STAMP) $(wildcard sample_models/*.py)
	$(BIN)/python -m sample_models.generate --out $(MODELS_DIR)
	@touch $@

# The users' symptom: the TF1 checkpoint and its exported SavedModel disagree by ~1e-3.
demo: setup models
	@$(BIN)/tftrace compare $(MODELS_DIR)/detector/ckpt $(MODELS_DIR)/detector_bf16/savedmodel \
	  --onednn off --out $(OUT) --force; status=$$?; \
	  if [ $$status -gt 1 ]; then exit $$status; fi; \
	  echo; echo "verdict: $$($(BIN)/python -c "import json;r=json.load(open('$(OUT)/report.json'));f=r['first_divergence'];print(r['verdict'], '- first divergence:', f['node'] if f else 'none')")"; \
	  echo "open $(abspath $(OUT))/report.html"

test: setup models other-tf
	TFTRACE_OTHER_PYTHON=$(abspath $(OTHER_VENV))/bin/python $(BIN)/python -m pytest -n 2 --durations=15 $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not browser" $(PYTEST_ARGS)

# Issue 7: every figure against its peer, in one run (~15-20 min on 2 cores); writes
# bench/results.json and BENCHMARKS.md. Models are generated once into out/bench/models.
bench: setup models
	$(BIN)/python -m bench

# Issue 29 item 4: ResNet-152 at batch 75 (~30 GB of activations per side, more than this
# machine's memory) captured twice and compared (~9 min, ~15 GB of disk under out/bench);
# writes bench/results_scale.json and its section of BENCHMARKS.md.
.PHONY: bench-scale
bench-scale: setup
	$(BIN)/python -m bench.scale_bench
	$(BIN)/python -m bench --rewrite-markdown

# Issue 25 item 5: a 35,000-op TF2 detector captured, compared and diffed against the least a
# fetch-all script spends on it (~15 min on 2 cores); rewrites its section of BENCHMARKS.md.
.PHONY: bench-detector
bench-detector: setup
	$(BIN)/python -m bench.detector_bench --workload standin

# The Model Garden's own RetinaNet (tf-models-official 2.20), measured by the same harness
# (~15 min on 2 cores). tf-models-official pins a TensorFlow of its own, so it and what
# official.vision imports are installed without their dependencies into a directory of their
# own, read only by the script that builds the exports; tftrace runs from the venv as always.
TFM_SITE  := out/bench/tfm-site
RETINANET := out/bench/models/retinanet
TFM_PKGS  := tf-models-official==2.20.0 tf-keras==2.21.0 gin-config==0.5.0 pyyaml==6.0.4 \
             tensorflow-hub==0.16.1 tensorflow-model-optimization==0.8.1 tensorflow-datasets==4.9.10 \
             tensorflow-metadata==1.21.0 dm-tree==0.1.10 immutabledict==4.3.1 pycocotools==2.0.11 \
             opencv-python-headless==5.0.0.93 sentencepiece==0.2.3 pandas==3.1.1 scipy==1.17.1 \
             matplotlib==3.11.2 pillow==13.0.0 psutil==7.2.2 six==1.17.0 tqdm==4.70.1 promise==2.3 \
             etils==1.15.0 array-record==0.8.6 simple-parsing==0.1.9 docstring-parser==0.18.0 toml==0.10.2 \
             googleapis-common-protos==1.76.0 python-dateutil==4.0.0 pytz==2026.6 tzdata==2026.6 \
             contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1 pyparsing==3.3.3
.PHONY: bench-retinanet
bench-retinanet: setup
	test -f $(TFM_SITE)/.installed || ($(BIN)/python -m pip install -q --no-deps --target $(TFM_SITE) $(TFM_PKGS) \
	  && touch $(TFM_SITE)/.installed)
	test -f $(RETINANET)/workload.json || PYTHONPATH=$(TFM_SITE) TF_USE_LEGACY_KERAS=1 \
	  $(BIN)/python bench/workloads/retinanet.py --out $(RETINANET)
	$(BIN)/python -m bench.detector_bench --workload model-garden --models $(RETINANET)

# The same harness on the sample detector, one round each: checks it runs, not the numbers.
.PHONY: bench-quick
bench-quick: setup models
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(MODELS_DIR) out build dist *.egg-info tests/_output .pytest_cache
