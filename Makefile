.PHONY: run test check lint typecheck sizes
run:  ## the console with embedded defaults (SQLite, local provider, demo data, scheduler)
	bin/run
test:  ## install what is needed and run the whole suite on PostgreSQL (what CI runs)
	bin/test
check: lint typecheck  ## the everyday loop: lint, type check, fast tests; installs nothing
	DATABASE_URL="$${TEST_DATABASE_URL:-$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/paperclip_console}}" \
	  .venv/bin/pytest -q -n auto -m "not slow and not browser"
lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
typecheck:  ## mypy + django-stubs, unannotated bodies included, on the files [tool.mypy] lists
	.venv/bin/mypy
sizes:  ## product modules over 500 lines and functions over 60 (README, The two commands)
	bin/sizes
