"""A checkpoint folder as one atomic, verified record: the files :func:`perm_circuits.models.save_model`
and :func:`perm_circuits.tasks.checkpoint.save_task_model` write, and their reader.

``model.safetensors`` is the record.  Its header metadata carries the whole config document (model
and task config, or the task record; the training metadata; ``tensors_sha256``, the SHA-256 of every
tensor's name, dtype, shape and bytes), so one ``rename`` replaces the model and everything that
describes it at once: a process killed at any moment leaves the old record or the new one, whole.
``config.json`` is the same document plus ``weights_sha256`` (the file's SHA-256), written after the
weights for people and tools that read JSON.  On load:

- a ``config.json`` whose ``weights_sha256`` names this ``model.safetensors`` must equal the record
  inside it; an edited config (say ``act_fn``, or a task field) is refused with what differs;
- a ``config.json`` left from the previous save (a kill between the two renames; its hash names
  other weights) is ignored: the record inside the weights is the checkpoint;
- a checkpoint written before records were embedded (the shipped ``pretrained/*``) loads as before:
  ``config.json`` plus the weights' SHA-256 it stores.

Saving refuses what the loader would refuse (weights that are not float32, NaN or infinite
values), before anything is written.  Nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor

from perm_circuits._util import atomic_write, json_safe, loads_json

__all__ = ["CONFIG_FILE", "FORMAT_VERSION", "RECORD_KEY", "WEIGHTS_FILE", "CheckpointError", "check_storable", "read_checkpoint_document",
           "read_checkpoint_files", "tensors_sha256", "write_checkpoint_files"]

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
RECORD_KEY = "perm_circuits.checkpoint"
"""The safetensors header-metadata key holding the checkpoint's config document (JSON text)."""
FORMAT = "perm_circuits.checkpoint"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupted or does not match its config."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tensors_sha256(tensors: dict[str, Tensor]) -> str:
    """SHA-256 of ``tensors``: every name (sorted), dtype, shape and the raw bytes of the values."""
    digest = hashlib.sha256()
    for key in sorted(tensors):
        value = tensors[key].detach().cpu().contiguous()
        digest.update(json.dumps([key, str(value.dtype), list(value.shape)]).encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes() if value.numel() else b"")
    return digest.hexdigest()


def check_storable(tensors: dict[str, Tensor]) -> None:
    """Refuse (ValueError naming the tensor) weights the loader refuses: it builds float32 models and
    checks every value is finite; ``extra.`` tensors (optimizer state) must be finite too."""
    for key, value in tensors.items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            raise TypeError(f"checkpoint tensors must map str names to Tensors, got {key!r}: {type(value).__name__}")
        if key.startswith("extra."):
            if value.is_floating_point() and not torch.isfinite(value).all():
                raise ValueError(f"{key} has NaN or infinite values: a checkpoint that cannot resume is not saved")
            continue
        if value.is_floating_point() and value.dtype != torch.float32:
            raise ValueError(f"weight {key} is {value.dtype}; checkpoints hold float32 models (the loader builds "
                             "float32): call model.float() before saving")
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise ValueError(f"weight {key} has NaN or infinite values: such a checkpoint would not load; not saved")


def write_checkpoint_files(
    path: str | os.PathLike, tensors: dict[str, Tensor], fields: dict[str, Any], metadata: dict[str, Any] | None = None
) -> Path:
    """Write checkpoint folder ``path``: ``tensors`` and the record (``fields``, what rebuilds the model;
    ``metadata``; the tensors' SHA-256) in ``model.safetensors``, renamed into place in one step, then
    ``config.json`` (the record and the file's SHA-256).  ``metadata`` must be a JSON-serializable dict
    (NaN becomes ``null``); it, the fields and the tensors (float32 and finite weights) are checked
    before anything is written.  The writer of :func:`~perm_circuits.models.save_model` and
    :func:`~perm_circuits.tasks.checkpoint.save_task_model`."""
    path = Path(path)
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
    metadata = json_safe(metadata or {})
    json.dumps(metadata, allow_nan=False)  # fail before writing anything if not serializable
    json.dumps(fields, allow_nan=False)
    check_storable(tensors)
    record = {"format": FORMAT, "format_version": FORMAT_VERSION, **fields, "metadata": metadata,
              "tensors_sha256": tensors_sha256(tensors)}
    header = json.dumps(record, sort_keys=True, allow_nan=False)
    atomic_write(path / WEIGHTS_FILE, lambda tmp: save_file(tensors, tmp, metadata={RECORD_KEY: header}))
    document = {**record, "weights_sha256": _sha256(path / WEIGHTS_FILE)}
    text = json.dumps(document, indent=2, sort_keys=True, allow_nan=False)
    atomic_write(path / CONFIG_FILE, lambda tmp: Path(tmp).write_text(text + "\n", encoding="utf-8"))
    return path


def _embedded_record(weights: Path) -> dict[str, Any] | None:
    """The record in ``weights``' safetensors header (``None``: a checkpoint saved before records were embedded)."""
    try:
        with safe_open(str(weights), framework="pt") as handle:
            header = (handle.metadata() or {}).get(RECORD_KEY)
    except Exception as error:  # safetensors raises its own error types
        raise CheckpointError(f"cannot read {weights}: {error}") from None
    if header is None:
        return None
    try:
        record = loads_json(header, f"the record in {weights}")
    except (json.JSONDecodeError, ValueError) as error:
        raise CheckpointError(f"the record in {weights}'s header is not valid: {error}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CheckpointError(f"the record in {weights}'s header is not a perm_circuits checkpoint record")
    return record


def _read_config(path: Path) -> dict[str, Any]:
    try:
        document = loads_json(path.read_text(encoding="utf-8"), str(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None
    except ValueError as error:  # nested too deep
        raise CheckpointError(str(error)) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a perm_circuits checkpoint config")
    return document


def _differences(saved: Any, edited: Any, where: str = "") -> list[str]:
    """Where ``edited`` differs from ``saved`` (dotted keys, both values)."""
    if isinstance(saved, dict) and isinstance(edited, dict):
        out = []
        for key in sorted(set(saved) | set(edited), key=str):
            name = f"{where}.{key}" if where else str(key)
            if key not in edited:
                out.append(f"{name} removed (saved {saved[key]!r})")
            elif key not in saved:
                out.append(f"{name} added ({edited[key]!r})")
            else:
                out.extend(_differences(saved[key], edited[key], name))
        return out
    return [] if saved == edited else [f"{where}: saved {saved!r}, config.json has {edited!r}"]


def _check_version(document: dict[str, Any]) -> None:
    if document.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint format_version {document.get('format_version')!r} is not supported "
                              f"(expected {FORMAT_VERSION})")


def read_checkpoint_document(path: str | os.PathLike) -> dict[str, Any]:
    """The config document of checkpoint folder ``path`` as :func:`read_checkpoint_files` trusts it
    (the record in the weights' header, else ``config.json``), reading no tensor and checking no hash."""
    path = Path(path)
    record = _embedded_record(path / WEIGHTS_FILE) if (path / WEIGHTS_FILE).is_file() else None
    if record is not None:
        return record
    if not (path / CONFIG_FILE).is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} has no {CONFIG_FILE}")
    return _read_config(path / CONFIG_FILE)


def read_checkpoint_files(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Validated config document and tensors of a checkpoint folder (no model built): the record and
    every hash checked (see the module's docstring); :class:`CheckpointError` says what is wrong."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {str(path)!r} does not exist")
    weights, config = path / WEIGHTS_FILE, path / CONFIG_FILE
    if not weights.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} has no {WEIGHTS_FILE if config.is_file() else CONFIG_FILE}")
    record = _embedded_record(weights)
    actual = _sha256(weights)
    if record is None:  # written before the record was embedded: config.json and the weights' hash
        if not config.is_file():
            raise CheckpointError(f"checkpoint {str(path)!r} has no {CONFIG_FILE}")
        document = _read_config(config)
        _check_version(document)
        if actual != document.get("weights_sha256"):
            raise CheckpointError(f"{weights} does not match the SHA-256 stored in config.json "
                                  f"(stored {document.get('weights_sha256')!r}, file {actual!r}): corrupted or replaced")
    else:
        _check_version(record)
        document = {**record, "weights_sha256": actual}
        if config.is_file():
            written = _read_config(config)
            if written.get("weights_sha256") == actual:  # this save's config.json (an older one names other weights)
                differ = _differences(document, written)
                if differ:
                    raise CheckpointError(
                        f"{config} differs from the record saved with the weights in {weights}: {'; '.join(differ[:8])}"
                        f"{f' (and {len(differ) - 8} more)' if len(differ) > 8 else ''}. An edited config would "
                        "silently change the model or its task: restore it, or load and save the model again")
    try:
        tensors = load_file(weights)
    except Exception as error:  # safetensors raises its own error types
        raise CheckpointError(f"cannot read {weights}: {error}") from None
    if record is not None and tensors_sha256(tensors) != record.get("tensors_sha256"):
        raise CheckpointError(f"{weights} does not match the SHA-256 of its tensors stored in its record "
                              f"(stored {record.get('tensors_sha256')!r}): corrupted or replaced")
    return document, tensors
