# The course's two commands (see README.md):
#   make lab    - set everything up (once) and open your working copy of the course (lab/) in JupyterLab
#   make test   - set everything up (once) and run the whole test suite: lint, unit tests, notebooks
# and make lab-refresh brings lab/ up to date after a git pull (your changed files are kept). For instructors:
#   make instructor - JupyterLab in notebooks/assignments with nbgrader's menu and formgrader (see its README)
# Everything lives in .venv; delete it to start over. PYTHON picks the interpreter that makes it.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The Jupyter kernel the lessons ask for (every notebook's metadata.kernelspec names it). It lives inside
# .venv, not in ~/.local: a kernel there cannot point at another checkout's (maybe deleted) .venv.
KERNEL       := pipeline-course
KERNEL_TITLE := Python (pipeline course)
KERNEL_SPEC  := $(VENV)/share/jupyter/kernels/$(KERNEL)/kernel.json
# Every JupyterLab of this .venv saves a notebook with one-line stand-ins where its live widgets were, so a
# lesson run, saved and reopened shows "[the dashboard: run this cell to use it]", not a widget error
# (course_lib/widgets/stand_in.py: the Jupyter server's pre_save_hook; a .d/ file would not be read for it)
SAVE_HOOK    := $(VENV)/etc/jupyter/jupyter_server_config.json
SETUP        := $(STAMP) $(KERNEL_SPEC) $(SAVE_HOOK)
# Extra pip arguments for torch, e.g. a CUDA build: make lab TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH_INDEX ?=
# Extra JupyterLab arguments, e.g. make lab LAB_ARGS="--port=9999 --no-browser"
# `make notebooks` runs the lessons side by side under nbval (pytest-xdist; each notebook's cells stay
# in order on one worker): 2 halves the time on a 2-core laptop; more need about 1.5 GiB of memory each
NB_WORKERS ?= 2
LAB_ARGS ?=
# Jupyter refuses to run as root unless told; containers and cloud notebooks often are root
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

# The student's working copy (course_assignments/kit.py): the lessons and the released assignments only,
# git-ignored, so running a lesson never changes a tracked file and no solution is a click away
LAB_DIR ?= lab

.PHONY: lab lab-refresh instructor test lint tools unit notebooks setup clean gpu-check

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install -q torch==2.13.0 --index-url $(TORCH_INDEX),)
	$(BIN)/python -m pip install -q -e ".[dev]"
	@# the course's own modules compiled once: where PYTHONDONTWRITEBYTECODE is set (CI, some containers)
	@# every process would compile them again (about 60 ms each for the library's usual imports)
	$(BIN)/python -m compileall -q course_lib course_assignments course_grading >/dev/null
	@touch $(STAMP)

# ipykernel writes the spec through a temp folder it leaves behind, empty: give it one of ours, then remove it
$(KERNEL_SPEC): $(STAMP)
	@mkdir -p $(VENV)/tmp-kernel
	TMPDIR=$(VENV)/tmp-kernel $(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) \
		--display-name "$(KERNEL_TITLE)" >/dev/null
	@rm -rf $(VENV)/tmp-kernel

$(SAVE_HOOK): $(STAMP) course_lib/widgets/stand_in.py
	@mkdir -p $(dir $@)
	$(BIN)/python -c "import json; from course_lib.widgets.stand_in import SERVER_CONFIG as c; print(json.dumps(c))" > $@

setup: $(SETUP)

# Students' JupyterLab leaves nbgrader out (its menu, the Create Assignment panel, formgrader): a Jupyter
# config dir, put first on JUPYTER_CONFIG_PATH, switches its lab and server extensions off for this run only.
STUDENT_CONFIG := $(VENV)/student-jupyter-config
NBGRADER_OFF := "nbgrader.server_extensions.formgrader": false, "nbgrader.server_extensions.assignment_list": false, \
  "nbgrader.server_extensions.course_list": false, "nbgrader.server_extensions.validate_assignment": false
$(STUDENT_CONFIG)/jupyter_server_config.json: $(STAMP)
	@mkdir -p $(STUDENT_CONFIG)/labconfig
	@echo '{"disabledExtensions": {"@jupyter/nbgrader": true}}' > $(STUDENT_CONFIG)/labconfig/page_config.json
	@echo '{"ServerApp": {"jpserver_extensions": {$(NBGRADER_OFF)}}}' > $@

# JUPYTER_PREFER_ENV_PATH: this .venv's kernel wins over one of the same name in ~/.local (older
# checkouts installed theirs there)
$(LAB_DIR)/.kit.json: | $(SETUP)
	$(BIN)/python -m course_assignments.kit $(LAB_DIR)

lab: $(SETUP) $(STUDENT_CONFIG)/jupyter_server_config.json $(LAB_DIR)/.kit.json
	JUPYTER_CONFIG_PATH=$(abspath $(STUDENT_CONFIG)) JUPYTER_PREFER_ENV_PATH=1 \
	  $(BIN)/jupyter lab --notebook-dir=$(LAB_DIR) --ServerApp.ip=127.0.0.1 $(ROOT_FLAG) $(LAB_ARGS)

lab-refresh: | $(SETUP)
	$(BIN)/python -m course_assignments.kit $(LAB_DIR) --refresh

# Instructors: nbgrader on, served from the course directory (nbgrader reads nbgrader_config.py there),
# with .venv/bin on PATH (nbgrader runs `alembic` to set up its gradebook). Autograde runs students' code
# in bubblewrap (course_grading/sandbox.py): installed here when it is missing and we may.
instructor: $(SETUP)
	@bash course_grading/ensure_sandbox.sh || true
	cd notebooks/assignments && PATH="$(abspath $(BIN)):$$PATH" JUPYTER_PREFER_ENV_PATH=1 \
	  $(abspath $(BIN))/jupyter lab --ServerApp.ip=127.0.0.1 $(ROOT_FLAG) $(LAB_ARGS)

lint: $(SETUP)
	$(BIN)/ruff check course_lib course_assignments course_grading tests bench data

# The suite runs this many tests at a time (pytest-xdist; 0: one after another, in one process). Each
# worker takes one file, or one notebook, at a time (--dist loadfile: a file's fixtures are made once,
# a notebook's cells run in order on one kernel), the longest first (tests/conftest.py's LONGEST_FIRST,
# so that no worker runs on alone at the end); the tests that measure or count what runs on the machine
# (-m serial, tests/conftest.py's SERIAL) run alone after them. More workers need about 1.5 GiB each.
# Three on 2 cores: much of the suite waits (paced ops, sleeping links, processes starting), and a third
# worker fills that time (a fresh clone on 2 cores: 12:06 for this part, against 13:07-13:20 with two).
UNIT_WORKERS ?= 3
XDIST = -n $(UNIT_WORKERS) --dist loadfile --no-loadscope-reorder
NBVAL := --nbval-lax --nbval-current-env -p no:randomly
PYTEST := $(BIN)/python -m pytest -q
tools: $(SETUP)
	@bash tests/browser/ensure_browser.sh
	@bash tests/ensure_iproute2.sh
	@bash course_grading/ensure_sandbox.sh || true  # once, before the grading tests' workers start

unit: tools
	$(PYTEST) tests -m "not serial" $(XDIST) --durations=20
	$(PYTEST) tests -m serial --durations=5

# Running every lesson changes no file git tracks and leaves none it would add (tests/course/test_git_pull.py):
# `git status` after the run is what it was before (outside a git checkout, the run alone)
GIT_STATUS := { git status --porcelain 2>/dev/null || true; }
SAME_STATUS := $(GIT_STATUS) | diff $(VENV)/.status-before - || { echo "the run changed the files above (git status)"; exit 1; }
notebooks: $(SETUP)
	@$(GIT_STATUS) > $(VENV)/.status-before
	$(PYTEST) $(NBVAL) -n $(NB_WORKERS) --dist loadfile --no-loadscope-reorder notebooks
	@$(SAME_STATUS)

# unit and notebooks in one run (no worker waits at the end of one part for the next to start), the
# serial tests alone after it; git status is checked around both
test: lint tools
	@$(GIT_STATUS) > $(VENV)/.status-before
	$(PYTEST) tests notebooks -m "not serial" $(NBVAL) $(XDIST) --durations=25
	$(PYTEST) tests -m serial --durations=5
	@$(SAME_STATUS)

# every GPU path once, with a report (PASS / SKIP / FAIL); on a machine without a GPU, the CPU path
gpu-check: $(STAMP)
	$(BIN)/python bench/gpu_check.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
