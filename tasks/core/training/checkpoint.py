"""Atomic epoch checkpoints: temporary file, fsync, rename, then a completion marker."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(ckpt_dir: Path, epoch: int, state: dict[str, Any], fingerprint: str) -> Path:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"epoch_{epoch:04d}.pt"
    tmp = ckpt_dir / f".epoch_{epoch:04d}.pt.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save({**state, "epoch": epoch, "fingerprint": fingerprint}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    marker = final.with_suffix(".done")
    with open(marker, "w") as f:
        json.dump({"epoch": epoch, "fingerprint": fingerprint}, f)
        f.flush()
        os.fsync(f.fileno())
    dfd = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return final


def complete_checkpoints(ckpt_dir: Path, fingerprint: str) -> list[Path]:
    """Checkpoints with a completion marker whose data fingerprint matches, newest first."""
    if not ckpt_dir.is_dir():
        return []
    out = []
    for marker in sorted(ckpt_dir.glob("epoch_*.done"), reverse=True):
        try:
            meta = json.loads(marker.read_text())
        except (json.JSONDecodeError, OSError):
            continue
        path = marker.with_suffix(".pt")
        if meta.get("fingerprint") == fingerprint and path.is_file():
            out.append(path)
    return out


def latest_checkpoint(ckpt_dir: Path, fingerprint: str) -> Path | None:
    """Newest checkpoint with a completion marker whose data fingerprint matches."""
    found = complete_checkpoints(ckpt_dir, fingerprint)
    return found[0] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)


def load_latest(ckpt_dir: Path, fingerprint: str, warn=print) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads: a damaged one (truncated, unreadable) is named, skipped, and the one
    before it used."""
    for path in complete_checkpoints(ckpt_dir, fingerprint):
        try:
            return path, load_checkpoint(path)
        except Exception as exc:  # torch raises several kinds for a truncated or corrupt file
            warn(f"checkpoint {path} is damaged ({type(exc).__name__}: {str(exc)[:120]}); using the one before it")
    return None


def weights_digest(model_path: Path) -> str:
    """SHA-256 of a saved model's weights alone (each tensor's name, dtype, shape and bytes, in name order): what
    the model computes, not when it was saved. A stage scoring the model keys its output by this."""
    import hashlib

    record = torch.load(model_path, map_location="cpu", weights_only=False)
    digest = hashlib.sha256()
    for name, tensor in sorted(record["model"].items()):
        t = tensor.detach().contiguous().cpu()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}:".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()
