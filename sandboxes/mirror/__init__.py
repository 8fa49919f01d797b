"""Read-only mirror of a Paperclip database into the console's models (issue 7)."""
