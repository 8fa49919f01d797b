"""Paperclip's own API: the client that attaches a verified export to the task,
and the zip parts it sends (docs/rules.md, salvage on the task)."""
