# vizdist: the two commands the README gives.
#   make        set up .venv and open the notebook course in JupyterLab (4 logical CPUs)
#   make test   set up .venv and run every test: unit tests and all notebooks under nbval
# Other targets: make setup, make smoke (the smoke suite on the oldest TensorFlow of each Keras), make notebooks
# (re-run notebooks and commit their outputs), make bench.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# TF=gpu installs TensorFlow with CUDA (make TF=gpu); default is the CPU build.
TF     ?= cpu
PORT   ?= 8888
# Two pytest processes (most tests wait on TF start-up, worker processes or a browser); a module or
# notebook stays in one process, in order (--dist loadscope). PYTEST_PARALLEL= runs them in one.
PYTEST_PARALLEL ?= -n 2 --dist loadscope
# make test also runs the smoke suite (tests marked smoke) on the oldest TensorFlow of each Keras: TF 2.15
# (Keras 2) and TF 2.16 (Keras 3), each in a virtualenv of its own (.venv-tf2.15.1, ...) installed in one
# pip call, which resolves numpy for that TF (a second call can pull numpy 2 over their numpy<2), with only
# the test tools the smoke suite needs (the smoke extra: no nbval, JupyterLab or browser).
# vizdist/instrument/core/versions.py's CI_TESTED and the README's table name the same versions.
OLD_TF ?= 2.15.1 2.16.2
OLD_VENVS := $(OLD_TF:%=.venv-tf%)
# The modules that hold smoke tests (only those are collected: the others may import tools the smoke extra lacks).
SMOKE_TESTS = $(shell grep -rl --include='*.py' 'pytest.mark.smoke' tests)
export TF_CPP_MIN_LOG_LEVEL := 3
export TF_ENABLE_ONEDNN_OPTS := 0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: lab setup test smoke notebooks student bench clean
.DEFAULT_GOAL := lab

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-$(TF): $(BIN)/activate pyproject.toml
	$(BIN)/python -m pip install -q -e ".[$(TF),lab,test]"
	$(BIN)/python -c "import tensorflow, vizdist" >/dev/null
	touch $@

setup: $(VENV)/.installed-$(TF)

.venv-tf%/.installed: pyproject.toml
	$(PYTHON) -m venv --clear .venv-tf$*
	.venv-tf$*/bin/python -m pip install -q -e ".[cpu,smoke]" "tensorflow-cpu==$*"
	.venv-tf$*/bin/python -c "import tensorflow, vizdist" >/dev/null
	touch $@

lab: setup
	$(BIN)/jupyter lab notebooks/00_tour.ipynb --ip=127.0.0.1 --port=$(PORT) $(if $(filter 0,$(shell id -u)),--allow-root,)

test: setup
	bash .ci/browser-deps
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)
	$(MAKE) --no-print-directory smoke

smoke: $(OLD_VENVS:%=%/.installed)
	set -e; for v in $(OLD_VENVS); do \
	  $$v/bin/python -c "import tensorflow as tf, keras; print('== smoke suite: TF', tf.__version__, 'Keras', keras.__version__)"; \
	  $$v/bin/python -m pytest $(PYTEST_PARALLEL) -o addopts="-ra -p no:cacheprovider" -m smoke $(SMOKE_TESTS); \
	done

notebooks: setup
	$(BIN)/python .ci/run_notebooks.py $(or $(NB),notebooks/*.ipynb)
	$(BIN)/python .ci/readme_image.py notebooks/img/split.png

# The course with every reveal, check and answer cleared (every output from a notebook's first Predict prompt on),
# the model answers (solutions/) copied beside it: student/.
student: setup
	$(BIN)/python .ci/student.py student

# Every script in benchmarks/ prints its figures (measured side by side in one run) with the aim beside them.
bench: setup
	set -e; for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) $(OLD_VENVS) artifacts .pytest_cache student
