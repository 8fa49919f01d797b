"""The ground floor: pure rules over plain data (docs/rules.md). Nothing here
imports Django models or touches the database; the reconciler, the console and
the tests ask these functions."""
