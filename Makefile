# Two commands matter: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/pikku
PYTEST_ARGS ?=
# Test processes (pytest-xdist), each with its own test database; 0 runs the suite in this one.
PYTEST_WORKERS ?= 3

.PHONY: install test test-sqlite wheel-venv test-wheel lint docs demo migrate worker openapi clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# Postgres when reachable (or required by PIKKU_REQUIRE_POSTGRES), else SQLite with a loud warning.
test: $(STAMP)
	@if $(PY) -m project.dbprobe "$(DATABASE_URL)"; then \
		echo "==> tests on PostgreSQL ($(DATABASE_URL))"; \
		DATABASE_URL="$(DATABASE_URL)" $(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS); \
	elif [ -n "$$PIKKU_REQUIRE_POSTGRES" ]; then \
		echo "ERROR: PIKKU_REQUIRE_POSTGRES is set but PostgreSQL at $(DATABASE_URL) is unreachable" >&2; exit 1; \
	else \
		echo "#################################################################"; \
		echo "## WARNING: PostgreSQL unreachable at $(DATABASE_URL)"; \
		echo "## Running on SQLite: tests marked 'postgres' are SKIPPED."; \
		echo "#################################################################"; \
		env -u DATABASE_URL $(PY) -m pytest -n $(PYTEST_WORKERS) -m "not postgres" $(PYTEST_ARGS); \
	fi

# The embedded default: every test that does not need PostgreSQL, on SQLite (CI runs it too).
test-sqlite: $(STAMP)
	env -u DATABASE_URL $(PY) -m pytest -n $(PYTEST_WORKERS) -m "not postgres" $(PYTEST_ARGS)

# The install the README gives until a release exists: the sdist and the wheel built from this
# tree, the wheel installed into a fresh virtualenv outside it (wheel-venv, into WHEEL_DIR), and
# the README followed in a fresh startproject with that virtualenv, not this checkout
# (test-wheel; a new WHEEL_DIR unless given one wheel-venv filled). CI runs both.
WHEEL_DIR ?=

wheel-venv: $(STAMP)
	@set -e; dir=$${WHEEL_DIR:?WHEEL_DIR names the directory to build and install into}; \
	echo "==> python -m build (the sdist, then the wheel from it) into $$dir/dist"; \
	$(PY) -m build --outdir $$dir/dist . > $$dir/build.log 2>&1 || { cat $$dir/build.log; exit 1; }; \
	echo "==> a fresh virtualenv with the wheel: $$dir/venv"; \
	$(PYTHON) -m venv $$dir/venv; \
	$$dir/venv/bin/pip install --quiet $$dir/dist/*.whl

test-wheel: $(STAMP)
	@set -e; dir=$${WHEEL_DIR:-$$(mktemp -d)}; \
	test -x $$dir/venv/bin/python || $(MAKE) --no-print-directory wheel-venv WHEEL_DIR=$$dir; \
	README_INSTALLED_PYTHON=$$dir/venv/bin/python $(PY) -m pytest -p no:cacheprovider \
		tests/e2e/test_readme__fresh_project.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy pikku_workflows

# Regenerate the committed OpenAPI schema of the HTTP API (a test fails when it drifts).
openapi: $(STAMP)
	$(PY) manage.py spectacular --custom-settings pikku_workflows.api.schema.SCHEMA_SETTINGS \
		--fail-on-warn --file docs/openapi.yaml

# The docs/ pages and the public API's docstrings as a static site in site/. Strict: a broken
# link or anchor, or an API entry that no longer resolves, fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

migrate: $(STAMP)
	$(PY) manage.py migrate --noinput

demo: $(STAMP)
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py demo_server

clean:
	rm -rf $(VENV) db.sqlite3* site
