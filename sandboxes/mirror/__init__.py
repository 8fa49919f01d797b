"""Read-only mirror of a Paperclip database into the console's models
(README, Mirroring a Paperclip database; docs/architecture.md, the rooms)."""
