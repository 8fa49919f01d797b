"""Build a reconciler fleet in a scratch console database, run as a subprocess:
`python -m tests.deploy.qcluster_fleet < {"simulator_url", "sandbox_ids", "files"}`.

The test process is bound to its own test database; this writes where the
q clusters under test read (DATABASE_URL of the subprocess)."""

import json
import sys

import django


def main() -> None:
    django.setup()
    from sandboxes import models as m
    from tests import factories as f

    spec = json.load(sys.stdin)
    files = {path: data.encode() for path, data in spec["files"].items()}
    env = f.EnvironmentFactory(
        name="qcluster-fleet",
        provider="daytona",
        api_url=spec["simulator_url"],
        retirement_mode=m.RetirementMode.AUTO,
        max_retirements_per_pass=len(spec["sandbox_ids"]),
    )
    for sid in spec["sandbox_ids"]:
        lease = f.EnvironmentLeaseFactory(
            environment=env,
            provider_lease_id=sid,
            status=m.LeaseStatus.FAILED,
            execution_workspace__saved_manifest=f.manifest_for(files),
        )
        f.stop_receipt(lease)
    print(m.EnvironmentLease.objects.count())


if __name__ == "__main__":
    main()
