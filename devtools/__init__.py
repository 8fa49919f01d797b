"""The harness around the product: the chaos wave, the Daytona simulator, the
demo fleet, the benchmark fleet and the screenshots. Installed for development
(`DEBUG` on: `make run`) and by the test settings, never in production;
nothing under `sandboxes/` imports it (tests/deploy/test_no_devtools.py)."""
