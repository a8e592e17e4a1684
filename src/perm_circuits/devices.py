"""Which device a model and its tensors live on.

Everything runs on the model's device (``model_device(model)``), with nothing moved back to the CPU
inside a loop.  The data generators stay on the CPU (the same batches on every machine); a batch
moves to the model's device once, right after it is drawn.  ``device=`` (default the CPU) takes
``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or a ``torch.device``.
"""

from __future__ import annotations

import itertools

import torch

__all__ = ["device_forward", "model_device", "resolve_device", "to_device"]


def resolve_device(device: object) -> torch.device:
    """``device`` as a ``torch.device`` (``None`` -> the CPU); a clear error for a bad or absent one."""
    if device is None:
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str such as 'cpu' or 'cuda', a torch.device or None, got {type(device).__name__}")
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"device {device!r} is not a torch device name ('cpu', 'cuda', 'cuda:0', 'mps'): {error}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asks for CUDA, but torch.cuda.is_available() is False on this machine")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} asks for MPS, which this machine does not have")
    return resolved


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s parameters (the CPU for a module without any).

    Raises:
        ValueError: the parameters are on the ``meta`` device (shapes without values: nothing can run).
    """
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None)
    if tensor is not None and tensor.device.type == "meta":
        raise ValueError(f"{type(model).__name__}'s weights are on the meta device (shapes without values): build or "
                         "load it on a real device ('cpu', 'cuda'), or load its weights first (model.to_empty(...) "
                         "then load_state_dict)")
    return torch.device("cpu") if tensor is None else tensor.device


def to_device(model: torch.nn.Module, device: str | torch.device | None) -> torch.nn.Module:
    """Move ``model`` to ``device`` (``None``: leave it where it is); returns the model."""
    return model if device is None else model.to(resolve_device(device))


def device_forward(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """``model(tokens)`` run on the model's device, the output returned on the tokens' device (no-op
    moves when they agree); active hooks run as usual, gradients flow through."""
    out = model(tokens.to(model_device(model)))
    return out.to(tokens.device) if isinstance(out, torch.Tensor) else out
