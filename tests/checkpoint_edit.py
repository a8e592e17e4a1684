"""Test helper: hand-craft a checkpoint whose record itself is wrong (the loader's checks of the
record's content), as a consistent file: the edited record in the weights' header and in
config.json, with matching hashes, so the loader gets past the edited-config check."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from perm_circuits.checkpoint_io import RECORD_KEY, tensors_sha256


def edit_record(folder: Path, edit: Callable[[dict[str, Any]], Any] = lambda record: None,
                tensors: Callable[[dict[str, Any]], Any] = lambda tensors: None) -> Path:
    """Apply ``edit`` to checkpoint ``folder``'s record and ``tensors`` to its tensors (both in place)
    and write them back consistently (hashes recomputed)."""
    folder = Path(folder)
    weights, config = folder / "model.safetensors", folder / "config.json"
    values = load_file(weights)
    tensors(values)
    document = json.loads(config.read_text())
    document.pop("weights_sha256")
    edit(document)
    document["tensors_sha256"] = tensors_sha256(values)
    save_file(values, weights, metadata={RECORD_KEY: json.dumps(document, sort_keys=True)})
    document["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    config.write_text(json.dumps(document))
    return folder
