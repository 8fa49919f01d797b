"""The ground floor: pure rules over plain data (docs/rules.md). Nothing here
imports Django, a model or the database (tests/rules/test_ground_floor.py); the
reconciler, the operator actions, the pages and the API ask these functions,
and tests/rules/ tests them without a database."""
