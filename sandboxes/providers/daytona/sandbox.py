"""What a Daytona `Sandbox` says, read into ours: its state (Daytona's 22, in
`base.SandboxState`), `desiredState`, labels and size, and which states each
lifecycle action must reach (docs/architecture.md, Providers)."""

from __future__ import annotations

from typing import Any

from sandboxes.providers.base import (
    ProviderProtocolError,
    Resources,
    SandboxInfo,
    SandboxState,
)

# What each lifecycle action must reach. A stop is satisfied by an archived
# sandbox too: it is not running, and archiving is further than stopping.
_TARGETS = {
    "start": frozenset({SandboxState.STARTED}),
    "stop": frozenset({SandboxState.STOPPED, SandboxState.ARCHIVED}),
    "archive": frozenset({SandboxState.ARCHIVED}),
}
# Daytona's `desiredState` once each action is accepted.
_DESIRED = {"start": "started", "stop": "stopped", "archive": "archived"}
# Archive needs a stopped sandbox ("Sandbox is not stopped"): stop these first.
_ARCHIVE_STOPS_FIRST = frozenset({SandboxState.STARTED, SandboxState.PAUSED})


def _number(value: object) -> float | None:
    """A JSON number; a bool is not one."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return None


def _resources(data: dict[str, Any]) -> Resources | None:
    cpu, memory, disk = (_number(data.get(key)) for key in ("cpu", "memory", "disk"))
    if cpu is None or memory is None or disk is None:
        return None
    gpu = _number(data.get("gpu"))
    return Resources(
        cpu=int(cpu),
        memory_gib=int(memory),
        disk_gib=int(disk),
        gpu=int(gpu) if gpu is not None else 0,
    )


def sandbox_info(data: object) -> SandboxInfo:
    """Read a `Sandbox` or `SandboxListItem` (daytona-api-client models)."""
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        raise ProviderProtocolError(f"not a sandbox: {str(data)[:200]}")
    labels = data.get("labels") or {}
    if not isinstance(labels, dict):
        raise ProviderProtocolError(f"sandbox {data['id']} has labels {labels!r}")
    given = data.get("desiredState")
    desired = given.strip().lower() if isinstance(given, str) and given.strip() else None
    state = SandboxState.parse(data.get("state"))
    if desired == "destroyed" and state != SandboxState.DESTROYED:
        # Soft-deleted (sandbox.service.ts destroy): renamed, on its way out, and
        # never coming back -- whatever state it still shows.
        state = SandboxState.DESTROYING
    return SandboxInfo(
        id=data["id"],
        name=str(data.get("name") or data["id"]),
        state=state,
        labels={str(k): str(v) for k, v in labels.items()},
        toolbox_proxy_url=data.get("toolboxProxyUrl") or None,
        raw=data,
        desired_state=desired,
        resources=_resources(data),
    )


def gone(sandbox_id: str) -> SandboxInfo:
    """What a 404 on a read means: the sandbox is destroyed."""
    return SandboxInfo(sandbox_id, sandbox_id, SandboxState.DESTROYED, {}, None, {})


def reached(action: str, info: SandboxInfo) -> bool:
    """The sandbox rests where `action` must take it, with no other change pending."""
    return info.state in _TARGETS[action] and not (
        info.pending and info.desired_state != _DESIRED[action]
    )


def ask_again(action: str, info: SandboxInfo, asking: bool) -> bool:
    """After a read that did not reach the target: must the action be asked
    again? Not while our own request is pending; yes once the sandbox settled
    somewhere else (someone started it again); otherwise as before."""
    if info.desired_state == _DESIRED[action] and info.pending:
        return False
    if not info.state.is_transitional and not info.pending:
        return True
    return asking


def shown(info: SandboxInfo) -> str:
    """The state as the provider wrote it, with the desired state while pending."""
    state = str(info.raw.get("state") or info.state)
    if info.pending and info.desired_state:
        return f"{state} (desired {info.desired_state})"
    return state
