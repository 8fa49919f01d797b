"""The wave's S3 bucket (`chaos_wave --storage s3`): moto's server on loopback
behind a door the wave shuts mid-wave (K8, the object store down), and the
invariant that every exported file is in the bucket with its hash.

The workers reach the bucket through the door (devtools/s3.py) with the same
environment variables production reads (README: object storage); the wave
checks the bucket directly, behind the door, so its own checks never depend on
the fault it plays.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from devtools import s3

BUCKET = "chaos-salvage"


@dataclass
class Bucket:
    server: s3.MotoServer = field(default_factory=s3.MotoServer)
    name: str = BUCKET
    door: s3.Door | None = None
    closed_at: float | None = None
    opened_at: float | None = None
    closed_why: str = ""
    outage: dict = field(default_factory=dict)

    def start(self) -> Bucket:
        if self.server.proc is None:
            self.server.start()
        self.door = s3.Door(self.server.port).open()
        self.client = s3.client(self.server.url)
        self.client.create_bucket(Bucket=self.name)
        return self

    def stop(self, *, server: bool = True) -> None:
        if self.door is not None:
            self.door.close()
        if server:
            self.server.stop()

    def env(self) -> dict[str, str]:
        assert self.door is not None
        return {
            "ATTACHMENTS_STORAGE": "s3",
            "AWS_STORAGE_BUCKET_NAME": self.name,
            "AWS_S3_ENDPOINT_URL": self.door.url,
            "AWS_S3_REGION_NAME": s3.REGION,
            "AWS_ACCESS_KEY_ID": s3.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": s3.SECRET_KEY,
        }

    # --- K8: the endpoint down mid-wave ----------------------------------------------

    def tick(self, now: float, *, exporting: bool, latest: float, seconds: float, say) -> None:
        """Shut the door once a worker is in the middle of an export (or at `latest`,
        monotonic), open it again `seconds` later."""
        assert self.door is not None
        if self.closed_at is None and (exporting or now >= latest):
            self.door.close()
            self.closed_at = now
            self.closed_why = "exports begun" if exporting else "no export seen by then"
            say(f"K8: the S3 endpoint {self.door.url} is down ({self.closed_why})")
        if (
            self.closed_at is not None
            and self.opened_at is None
            and now >= self.closed_at + seconds
        ):
            self.door.open()
            self.opened_at = now
            self.outage = {
                "endpoint": self.door.url,
                "down_seconds": round(now - self.closed_at, 2),
                "why_then": self.closed_why,
            }
            say(f"K8: the S3 endpoint is back after {now - self.closed_at:.1f}s")

    @property
    def is_down(self) -> bool:
        return self.door is not None and not self.door.is_open

    def failures_while_down(self) -> list[str]:
        """Failed attempts whose error names the endpoint (the audit trail keeps
        every one, whatever the record's last error became later)."""
        from sandboxes.models import AuditEvent

        assert self.door is not None
        return sorted(
            str(pk)
            for pk in AuditEvent.objects.filter(
                action__in=("retirement.failed", "retirement.needs_attention"),
                reason__contains=self.door.url,
            ).values_list("object_id", flat=True)
        )

    # --- the invariant -------------------------------------------------------------

    def stored_sha(self, key: str) -> str | None:
        try:
            body = self.client.get_object(Bucket=self.name, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        return hashlib.sha256(body).hexdigest()

    def missing(self) -> tuple[list[dict], int]:
        """Every file of every verified export receipt: named in this bucket, and
        there with its hash. Returns (problems, files checked)."""
        from sandboxes.models import Receipt

        problems, checked = [], 0
        for receipt in Receipt.objects.filter(kind="salvage_export"):
            payload = receipt.payload
            if payload.get("verified") is not True:
                continue
            for f in payload.get("files", []):
                checked += 1
                where = (f.get("backend"), f.get("bucket"))
                if where != ("s3", self.name):
                    problems.append({"sandbox": receipt.provider_lease_id, "file": f, "why": where})
                elif self.stored_sha(f["key"]) != f["sha256"]:
                    problems.append(
                        {
                            "sandbox": receipt.provider_lease_id,
                            "path": f["path"],
                            "key": f["key"],
                            "why": "not in the bucket with its hash",
                        }
                    )
        return problems, checked

    def report(self) -> dict:
        keys = [
            o["Key"]
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name)
            for o in page.get("Contents", [])
        ]
        problems, checked = self.missing()
        return {
            "backend": "s3",
            "bucket": self.name,
            "objects": len(keys),
            "exported_files_checked": checked,
            "missing_or_wrong": problems,
            "outage": self.outage,
            "failed_attempts_naming_the_endpoint": len(self.failures_while_down()),
        }
