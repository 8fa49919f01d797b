"""Provider I/O: one protocol over Daytona (HTTP), local directories and a simulator."""

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
