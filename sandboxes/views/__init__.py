"""HTML views of the operator console, one module per area."""
