.PHONY: run test lint bench
run:  ## the console with embedded defaults (SQLite, local provider, demo data, scheduler)
	bin/run
test:  ## install what is needed and run the whole suite on PostgreSQL
	bin/test
lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
