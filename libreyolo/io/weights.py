"""Resolve a weights name or path (SPEC U-1): local path -> LIBREYOLO_WEIGHTS_DIR -> bundled
assets -> Hugging Face Hub (cache first, then download). Nothing is fetched at import."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

from .. import env
from ..errors import CheckpointError

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def hub_download(filename: str, *, repo_id: str, local_files_only: bool) -> str:
    """Fetch ``filename`` from the Hub repository (or only look in the local cache)."""
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo_id=repo_id, filename=filename, local_files_only=local_files_only)


def hub_offline_reason() -> str | None:
    """Why a Hub download cannot be attempted right now (offline mode, no name resolution), or None.

    Checked before downloading so that an offline machine fails at once with a clear message
    instead of sitting through the HTTP client's retries.
    """
    import os
    import socket
    from urllib.parse import urlparse

    from ..config import env_flag

    if env_flag("HF_HUB_OFFLINE"):
        return "HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    host = urlparse(endpoint).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as e:
        return f"offline: cannot resolve {host} ({e.strerror or e})"
    return None


def cache_then_download(fetch: Callable[[bool], Path], *, what: str, tried: list[str]) -> Path | None:
    """``fetch(local_only=True)`` (the Hub cache), then ``fetch(local_only=False)`` (a download,
    unless :func:`hub_offline_reason` says the Hub is off); each failure becomes one entry of
    ``tried`` naming ``what`` and the error's whole first line. ``None`` when both failed."""
    for local_only in (True, False):
        where = f"Hub cache {what}" if local_only else f"Hub download {what}"
        where = where.rstrip()
        if not local_only:
            offline = hub_offline_reason()
            if offline:
                tried.append(f"{where} (skipped: {offline})")
                return None
        try:
            return fetch(local_only)
        except Exception as e:  # noqa: BLE001 - every Hub failure mode becomes one clear error
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""  # a whole first line, never cut
            tried.append(f"{where} ({type(e).__name__}{': ' + msg if msg else ''})")
    return None


def find_weights(name: str) -> Path:
    """Locate the file for ``name``; raise :class:`CheckpointError` saying what was tried."""
    tried: list[str] = []
    p = Path(name).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        found = sorted(q.name for q in p.glob("*.pt"))[:3] + sorted(q.name for q in p.glob("*/*.pt"))[:3]
        hint = f" (it holds {', '.join(found)})" if found else ""
        raise CheckpointError(f"model path '{p}' is a directory, not a weights file{hint}; pass the .pt file, "
                              "e.g. runs/detect/train/weights/best.pt.")
    if _is_path(name):
        base = p.name
        hint = (f", or pass just the name, e.g. {base!r}, to use bundled or Hub weights" if _WEIGHTS_NAME.match(base)
                else "")
        raise CheckpointError(
            f"weights file '{p}' does not exist (checked on disk only: a path with folders is never looked up "
            f"on the Hub); check the path{hint}.")
    if not _WEIGHTS_NAME.match(p.name):
        raise CheckpointError(
            f"weights file '{p}' does not exist in {Path.cwd()} and is not a libreyolo weights name such as "
            "'LibreYOLO9t.pt', so nothing was looked up on the Hub; check the path.")
    tried.append(f"local path {str(p)!r} (not found)")
    base = p.name
    extra = env.get("LIBREYOLO_WEIGHTS_DIR")
    if extra:
        cand = Path(extra).expanduser() / base
        if cand.is_file():
            return cand
        tried.append(f"LIBREYOLO_WEIGHTS_DIR {str(cand)!r} (not found)")
    cand = ASSETS / base
    if cand.is_file():
        return cand
    tried.append(f"bundled weights {base!r} (not shipped)")
    repo = env.get("LIBREYOLO_HUB_REPO") or ""
    found = cache_then_download(lambda local_only: Path(hub_download(base, repo_id=repo,
                                                                     local_files_only=local_only)),
                                what=f"{repo}/{base}", tried=tried)
    if found is not None:
        return found
    raise CheckpointError(
        f"could not find weights {name!r}. Tried: " + "; ".join(tried)
        + f". To build an untrained model instead use LibreYOLO({base!r}, pretrained=False)"
        " (CLI: pretrained=false)."
    )


# what bundled / Hub weights are called: Libre<FAMILY><size>[-<task>].pt (registry.parse_weights_name)
_WEIGHTS_NAME = re.compile(r"^Libre[A-Za-z0-9_]+(-[a-z]+)?(\.(pt|safetensors))?$", re.IGNORECASE)


def _is_path(name: str) -> bool:
    """A name with folders (``runs/x.pt``, ``./x.pt``, ``~/x.pt``) names a local file, never Hub weights."""
    return "/" in name or "\\" in name or name.startswith(("~", "."))


_SNAPSHOT_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def hub_snapshot_weights(folder: Path) -> Path | None:
    """The weights file of a Hub snapshot folder (``config.json`` + ``model.safetensors``)."""
    if not (folder.is_dir() and (folder / "config.json").is_file()):
        return None
    for name in _SNAPSHOT_WEIGHTS:
        if (folder / name).is_file():
            return folder / name
    return None


_HUB_ID = re.compile(r"^hf[-_]hub:(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+?)(?:@(?P<rev>[\w.-]+))?$")


def hub_repo_weights(name: str) -> Path | None:
    """``"hf-hub:<owner>/<repo>[@revision]"`` -> the local path of its ``model.safetensors`` (with
    ``config.json`` beside it, as the Hub client lays out a snapshot), from the Hub cache or else a
    download; ``None`` for any other name. The explicit prefix keeps local paths such as
    ``runs/best`` from ever being looked up on the Hub.

    Raises:
        CheckpointError: listing what was tried, when neither the cache nor a download has it.
    """
    m = _HUB_ID.match(name)
    if m is None:
        return None
    repo, rev = m["repo"], m["rev"]
    tried: list[str] = []

    def fetch(local_only: bool) -> Path:
        from huggingface_hub import hf_hub_download

        hf_hub_download(repo_id=repo, filename="config.json", revision=rev, local_files_only=local_only)
        for fname in _SNAPSHOT_WEIGHTS:
            try:
                return Path(hf_hub_download(repo_id=repo, filename=fname, revision=rev, local_files_only=local_only))
            except Exception as e:  # noqa: BLE001 - try the next file name, then report
                last = e
        raise last

    found = cache_then_download(fetch, what="", tried=tried)
    if found is not None:
        return found
    raise CheckpointError(f"could not get Hub repository {repo!r} (config.json + model.safetensors or "
                          f"pytorch_model.bin); tried: " + "; ".join(tried) + ".")
