"""Chaos waves: a seeded fleet, reconciler workers under faults, and invariant checks."""
