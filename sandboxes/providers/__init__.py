"""Provider I/O: one protocol over Daytona (HTTP) and local directories (the Daytona
simulator that tests and the demo use is devtools/simulator.py)."""

from sandboxes.providers.base import (
    CALL_HOOKS,
    BudgetExhausted,
    Confirmation,
    FileDigest,
    Provider,
    ProviderAuthError,
    ProviderError,
    ProviderProtocolError,
    Resources,
    RootNotFound,
    SandboxInfo,
    SandboxNotFound,
    SandboxState,
    TransientProviderError,
    UnsafePath,
)
from sandboxes.providers.registry import get_provider, reset_providers

__all__ = [
    "CALL_HOOKS",
    "BudgetExhausted",
    "Confirmation",
    "FileDigest",
    "Provider",
    "ProviderAuthError",
    "ProviderError",
    "ProviderProtocolError",
    "Resources",
    "RootNotFound",
    "SandboxInfo",
    "SandboxNotFound",
    "SandboxState",
    "TransientProviderError",
    "UnsafePath",
    "get_provider",
    "reset_providers",
]
