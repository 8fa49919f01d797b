"""Mirrors of the people around Paperclip's tasks: companies, agents and users
(docs/rules.md, the people around a sandbox).

The tables are Paperclip's (paperclipai/paperclip packages/db/src/schema/):
`companies` (companies.ts: id uuid, name), `agents` (agents.ts: id uuid,
company_id, name) and better-auth's `user` (auth.ts `authUsers`: id text,
name, email). A user's id is text, not a uuid: better-auth makes it, and
issues name it in `assignee_user_id` / `created_by_user_id` (text, no foreign
key in Paperclip). Rows an issue names before their own upsert arrives are
placeholders, as for every mirrored row.
"""

from django.db import models

from .mirror import MirroredModel


class Company(MirroredModel):
    """A Paperclip company; every mirrored row's `company_id` names one. Its own
    `company_id` is itself when ingest or the mirror sets it."""

    id = models.UUIDField(primary_key=True)
    name = models.CharField(max_length=200, blank=True)

    class Meta:
        verbose_name_plural = "companies"

    def __str__(self):
        return self.name or f"company {self.id}"


class Agent(MirroredModel):
    """A Paperclip agent (of `company_id`): it may be a task's assignee, never its owner."""

    id = models.UUIDField(primary_key=True)
    name = models.CharField(max_length=200, blank=True)

    def __str__(self):
        return self.name or f"agent {self.id}"


class PaperclipUser(MirroredModel):
    """A user of Paperclip (better-auth's `user` row), not a console login.
    Paperclip's users belong to no single company: `company_id` stays empty."""

    id = models.CharField(primary_key=True, max_length=255)
    name = models.CharField(max_length=200, blank=True)
    email = models.CharField(max_length=320, blank=True)

    class Meta:
        verbose_name = "Paperclip user"

    def __str__(self):
        return self.name or self.email or f"user {self.id}"
