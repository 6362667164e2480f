#!/usr/bin/env python3
"""Sync one model prefix from S3 into the node-local NVMe cache, verified, once per node.

Runs as an init container in front of every inference server pod:

    model_loader.py --source s3://BUCKET/meta-llama/Llama-3.1-8B-Instruct/hf \
                    --dest /mnt/k8s-disks/0/inferstack/models/meta-llama/Llama-3.1-8B-Instruct/hf

- Credentials come from boto3's default chain: EKS Pod Identity or IRSA in the cluster, an
  instance profile or environment variables elsewhere. The script takes no keys.
- The first pod on a node downloads; every later pod finds the completion marker and starts at
  once (one ``stat`` per file, no S3 call).
- Two pods arriving together cannot corrupt the cache: they serialize on an ``flock`` next to the
  destination; the holder downloads into a temporary folder on the same filesystem, verifies
  every file, writes the marker, then renames the folder into place (atomic). The waiter
  re-checks the marker once it holds the lock and finds the work done. A crash leaves only a
  temporary folder, which the next holder removes; the kernel drops a dead holder's lock.
- Verification: every file's size against S3, and its checksum where S3 holds a full-object one
  (CRC32, SHA-1 and SHA-256 with the standard library; CRC32C and CRC64NVME when ``awscrt`` is
  installed). Multipart "checksum of checksums" values cannot be recomputed without the part
  layout, so those files are checked by size.

Upload mode, the reverse direction, run by the TensorRT-LLM engine-build Job after ``trtllm-build``:

    model_loader.py --upload --dest /local/engine/dir --source s3://BUCKET/<model_id>/trtllm/<key>

- Every regular file under ``--dest`` (filtered by ``--include``) goes to ``--source/<relative path>``
  through boto3's managed transfer (multipart above ``PART_BYTES``), with a full-object CRC32 that
  S3 stores: the download side recomputes it, so a later sync verifies checksums, not only sizes.
- The CRC32 is computed from the local file first; after each upload, HEAD must return that size
  and that CRC32, or the run fails. Re-running skips files whose size and CRC32 already match.
- An empty or missing ``--dest`` fails. Any failed file fails the run (exit 1) and is named in the
  log; S3 may then hold part of the set, so the Job must not be treated as done: re-run it.

Prints one JSON line on stdout (``status`` is ``downloaded``, ``cached`` or ``uploaded``); logs on stderr.
Exit codes: 0 done, 1 failed (a download leaves nothing half-written in ``--dest``), 2 usage, 3 lock timeout.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import fnmatch
import hashlib
import json
import logging
import os
import shutil
import stat
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
from boto3.exceptions import Boto3Error  # type: ignore[import-untyped]
from boto3.s3.transfer import TransferConfig  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

log = logging.getLogger("model-loader")

MARKER = ".inferstack-complete.json"
"""Written last, inside the folder, before the rename: its presence means the folder is whole."""

STORE_MARKER = ".inferstack-upload-complete.json"
"""Written by an upload under its prefix after its last file is verified, naming every file with its size and CRC32:
the set there is whole. An upload first overwrites it with ``UPLOADING`` (an overwrite, not a delete: the build's
role may write objects, not delete them), so a re-run in progress, or one that failed halfway, leaves no finished
upload. Never downloaded into ``--dest``."""

UPLOADING = {"uploading": True}
"""The marker's content while an upload runs (or after one failed): no finished upload."""

EXIT_FAILED = 1
EXIT_LOCK_TIMEOUT = 3

# 64 MiB parts with 8 parallel ranges per file: large model shards (5-10 GB) download at the
# NIC's speed rather than one TCP stream's; s3transfer's own default part is 8 MiB.
PART_BYTES = 64 * 1024 * 1024
RANGES_PER_FILE = 8
HASH_CHUNK_BYTES = 8 * 1024 * 1024


class LoaderError(Exception):
    """A failure the loader reports in one line (no traceback)."""


class LockTimeout(LoaderError):
    pass


@dataclass(frozen=True)
class RemoteObject:
    key: str
    path: str
    """Path relative to the prefix, which is also the path under ``--dest``."""
    size: int
    etag: str


@dataclass(frozen=True)
class SyncResult:
    status: str
    """``downloaded`` or ``cached``."""
    dest: str
    files: int
    bytes: int
    checksums_verified: int
    seconds: float


@dataclass(frozen=True)
class UploadResult:
    status: str
    """``uploaded`` (also when every file was already there: see ``skipped``)."""
    source: str
    dest: str
    files: int
    bytes: int
    uploaded: int
    skipped: int
    """Files whose size and CRC32 already matched in S3."""
    checksums_verified: int
    """Files whose CRC32 as stored by S3 was compared with the local file's."""
    seconds: float


# --- S3 listing -------------------------------------------------------------------------------


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (``bucket``, ``some/prefix/``)."""
    if not uri.startswith("s3://"):
        raise LoaderError(f"--source must be an s3:// URI; got {uri!r}")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise LoaderError(f"--source names no bucket: {uri!r}")
    prefix = prefix.strip("/")
    # A trailing slash keeps "models/llama" from also matching "models/llama-2/...".
    return bucket, f"{prefix}/" if prefix else ""


def relative_path(prefix: str, key: str) -> str:
    """The object's path below the prefix, refusing anything that could escape ``--dest``."""
    rel = key[len(prefix) :]
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in rel:
        raise LoaderError(f"refusing object key {key!r}: its path would leave the destination folder")
    if rel == MARKER:
        raise LoaderError(f"refusing object key {key!r}: it collides with the completion marker")
    return rel


def list_objects(s3: Any, bucket: str, prefix: str, include: Sequence[str]) -> list[RemoteObject]:
    objects = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if item["Key"].endswith("/"):
                continue  # folder placeholder objects from the console
            path = relative_path(prefix, item["Key"])
            if path == STORE_MARKER or (include and not any(fnmatch.fnmatch(path, p) for p in include)):
                continue
            objects.append(RemoteObject(item["Key"], path, int(item["Size"]), item["ETag"].strip('"')))
    return sorted(objects, key=lambda o: o.path)


def finished_upload(s3: Any, source: str, include: Sequence[str] = ()) -> list[RemoteObject] | None:
    """The objects of the upload that finished under ``source`` (those its ``STORE_MARKER`` names, matching
    ``include``), or None when no upload has finished there (no marker, or an upload under way or failed). A marker
    naming a file that is missing or of another size (the set changed after it was written) raises ``LoaderError``."""
    bucket, prefix = parse_s3_uri(source)
    key = prefix + STORE_MARKER
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    try:
        manifest = json.loads(body)
        if manifest == UPLOADING:
            return None
        files = {str(path): int(meta["size"]) for path, meta in manifest["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LoaderError(f"s3://{bucket}/{key} is not an upload's manifest ({exc}): re-run the upload") from None
    listed = {o.path: o for o in list_objects(s3, bucket, prefix, include)}
    wanted = [path for path in files if not include or any(fnmatch.fnmatch(path, p) for p in include)]
    changed = [path for path in wanted if path not in listed or listed[path].size != files[path]]
    if changed:
        raise LoaderError(
            f"{source}: the upload's manifest names {len(changed)} file(s) missing or of another size there "
            f"({', '.join(sorted(changed)[:3])}): the set changed after the upload finished; re-run the upload"
        )
    return [listed[path] for path in sorted(wanted)]


# --- Checksums --------------------------------------------------------------------------------


def _crt_checksum(name: str) -> Callable[[bytes, int], int] | None:
    try:
        from awscrt import checksums  # type: ignore[import-not-found]  # optional: botocore[crt]
    except ImportError:
        return None
    fn: Callable[[bytes, int], int] = getattr(checksums, name)
    return fn


def _running(update: Callable[[bytes, int], int] | None, width: int) -> Callable[[Path], bytes] | None:
    if update is None:
        return None

    def digest(path: Path) -> bytes:
        value = 0
        with path.open("rb") as f:
            while chunk := f.read(HASH_CHUNK_BYTES):
                value = update(chunk, value)
        return value.to_bytes(width, "big")

    return digest


def _hashlib(name: str) -> Callable[[Path], bytes]:
    def digest(path: Path) -> bytes:
        with path.open("rb") as f:
            return hashlib.file_digest(f, name).digest()

    return digest


# S3 returns checksums base64-encoded, big-endian for the CRCs (S3 user guide, "Checking object
# integrity").
_DIGESTS: dict[str, Callable[[Path], bytes] | None] = {
    "ChecksumCRC32": _running(zlib.crc32, 4),
    "ChecksumCRC32C": _running(_crt_checksum("crc32c"), 4),
    "ChecksumCRC64NVME": _running(_crt_checksum("crc64nvme"), 8),
    "ChecksumSHA1": _hashlib("sha1"),
    "ChecksumSHA256": _hashlib("sha256"),
}


def full_object_checksum(head: dict[str, Any]) -> tuple[str, str] | None:
    """(field, value) of a checksum that covers the whole object, or ``None``.

    ``ChecksumType`` says it outright where S3 returns it; without it, a multipart upload (ETag
    ``...-N``) or a value ending in ``-N`` means a composite checksum of the parts.
    """
    checksum_type = head.get("ChecksumType")
    multipart = "-" in str(head.get("ETag", ""))
    for field in _DIGESTS:
        value = head.get(field)
        if not value:
            continue
        if checksum_type == "COMPOSITE" or (checksum_type is None and (multipart or "-" in value)):
            return None
        return field, value
    return None


def verify_file(path: Path, size: int, checksum: tuple[str, str] | None) -> bool:
    """Raise ``LoaderError`` unless ``path`` has ``size`` bytes and, where given and computable,
    the checksum. Returns whether a checksum was compared."""
    actual = path.stat().st_size
    if actual != size:
        raise LoaderError(f"{path.name}: size {actual} bytes, S3 says {size}")
    if checksum is None:
        return False
    field, expected = checksum
    digest = _DIGESTS[field]
    if digest is None:
        return False  # CRC32C/CRC64NVME without awscrt: size only
    actual_b64 = base64.b64encode(digest(path)).decode()
    if actual_b64 != expected:
        raise LoaderError(f"{path.name}: {field[len('Checksum') :]} {actual_b64}, S3 says {expected}")
    return True


# --- Cache state ------------------------------------------------------------------------------


def _manifest(source: str, include: Sequence[str], objects: Sequence[RemoteObject]) -> dict[str, Any]:
    return {
        "source": source,
        "include": list(include),
        "files": {o.path: {"size": o.size, "etag": o.etag} for o in objects},
    }


def cached_manifest(dest: Path, source: str, include: Sequence[str]) -> dict[str, Any] | None:
    """The marker's manifest when ``dest`` is a complete copy of this source, else ``None``.
    Checks that every file is still there with its size (a stat each, no reads, no S3)."""
    try:
        manifest: dict[str, Any] = json.loads((dest / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("source") != source or manifest.get("include") != list(include):
        return None
    for path, meta in manifest.get("files", {}).items():
        try:
            if (dest / path).stat().st_size != meta["size"]:
                return None
        except OSError:
            return None
    return manifest


@contextlib.contextmanager
def exclusive_lock(lock_path: Path, timeout_s: float, poll_s: float = 0.1) -> Iterator[None]:
    """``flock`` on a file beside the destination. The kernel releases it when the holder dies,
    so a crashed loader never wedges the node; the file itself is never deleted (deleting it
    would let two loaders lock two different inodes)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"another loader held {lock_path} for more than {timeout_s:g} s") from None
                time.sleep(poll_s)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_leftovers(parent: Path, name: str) -> None:
    """Temporary and replaced folders of loaders that died. Only called with the lock held."""
    for leftover in [*parent.glob(f".{name}.tmp-*"), *parent.glob(f".{name}.old-*")]:
        log.info("removing leftover %s", leftover)
        shutil.rmtree(leftover, ignore_errors=True)


# --- Sync -------------------------------------------------------------------------------------


def _download_all(s3: Any, bucket: str, objects: Sequence[RemoteObject], into: Path, workers: int) -> int:
    config = TransferConfig(
        multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=RANGES_PER_FILE
    )

    def one(obj: RemoteObject) -> bool:
        target = into / obj.path
        target.parent.mkdir(parents=True, exist_ok=True)
        head = s3.head_object(Bucket=bucket, Key=obj.key, ChecksumMode="ENABLED")
        if int(head["ContentLength"]) != obj.size:
            raise LoaderError(f"{obj.key} changed while loading (size {head['ContentLength']}, listed {obj.size})")
        s3.download_file(bucket, obj.key, str(target), Config=config)
        verified = verify_file(target, obj.size, full_object_checksum(head))
        _fsync(target)  # the marker must never reach the disk before the data it vouches for
        log.info("%s: %d bytes%s", obj.path, obj.size, ", checksum ok" if verified else "")
        return verified

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="download")
    try:
        futures = [pool.submit(one, obj) for obj in objects]
        verified = 0
        for future in as_completed(futures):
            verified += future.result()  # the first failure raises here
        return verified
    finally:
        # On failure, drop the queued files instead of downloading the rest of a model that is
        # going to be thrown away; the files already in flight finish first.
        pool.shutdown(wait=True, cancel_futures=True)


def sync(
    s3: Any,
    source: str,
    dest: Path,
    *,
    include: Sequence[str] = (),
    workers: int = 8,
    lock_timeout_s: float = 1800.0,
    require_finished_upload: bool = False,
) -> SyncResult:
    """Make ``dest`` a verified copy of ``source`` (see the module docstring). With ``require_finished_upload``, only
    of a set an upload finished (``STORE_MARKER``), exactly the files it names: an engine still being built, or
    whose build failed halfway, is refused, never cached on the node as if it were whole."""
    started = time.monotonic()
    bucket, prefix = parse_s3_uri(source)
    dest = dest.absolute()

    def cached(manifest: dict[str, Any]) -> SyncResult:
        files = manifest["files"]
        total = sum(meta["size"] for meta in files.values())
        return SyncResult("cached", str(dest), len(files), total, 0, round(time.monotonic() - started, 3))

    manifest = cached_manifest(dest, source, include)
    if manifest is not None:
        return cached(manifest)

    parent, name = dest.parent, dest.name
    parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(parent / f".{name}.lock", lock_timeout_s):
        # Whoever held the lock before us may have just finished the same work.
        manifest = cached_manifest(dest, source, include)
        if manifest is not None:
            return cached(manifest)
        _remove_leftovers(parent, name)

        if require_finished_upload:
            finished = finished_upload(s3, source, include)
            if finished is None:
                raise LoaderError(
                    f"{source} holds no finished upload (no {STORE_MARKER}): its engine build has not finished, or "
                    "failed; this init container fails until it has (see the model's engine-build Job)"
                )
            objects = finished
        else:
            objects = list_objects(s3, bucket, prefix, include)
        if not objects:
            raise LoaderError(f"no objects under {source}" + (f" matching {list(include)}" if include else ""))
        total = sum(o.size for o in objects)
        free = shutil.disk_usage(parent).free
        if free < total:
            raise LoaderError(f"{parent} has {free / 1e9:.1f} GB free; {source} needs {total / 1e9:.1f} GB")

        tmp = parent / f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            verified = _download_all(s3, bucket, objects, tmp, workers)
            (tmp / MARKER).write_text(json.dumps(_manifest(source, include, objects), indent=1, sort_keys=True))
            _fsync(tmp / MARKER)
            _fsync(tmp)
            old = parent / f".{name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            if dest.exists():
                # A stale or different copy: move it aside first, because rename() cannot replace
                # a non-empty folder. Servers still reading it keep their open files.
                dest.rename(old)
            tmp.rename(dest)
            _fsync(parent)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return SyncResult("downloaded", str(dest), len(objects), total, verified, round(time.monotonic() - started, 3))


# --- Upload (engine-build Job) -----------------------------------------------------------------


@dataclass(frozen=True)
class LocalFile:
    path: str
    """Path relative to ``--dest``, with ``/``: also the key below the prefix."""
    file: Path
    size: int


def local_files(dest: Path, include: Sequence[str]) -> list[LocalFile]:
    """Every regular file under ``dest`` that matches ``include``. Refuses a missing or empty folder
    and anything that is neither a folder nor a regular file (a symlink could leave ``dest``, and
    skipping it would upload a partial set)."""
    if not dest.is_dir():
        raise LoaderError(f"--dest {dest} is not a folder: nothing to upload")
    files = []

    def unreadable(exc: OSError) -> None:
        raise LoaderError(f"cannot list {exc.filename}: {exc.strerror}")  # skipping it would upload a partial set

    for root, dirs, names in os.walk(dest, onerror=unreadable):
        dirs.sort()
        for name in sorted([*dirs, *names]):
            file = Path(root) / name
            mode = file.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            path = file.relative_to(dest).as_posix()
            if not stat.S_ISREG(mode):
                raise LoaderError(f"refusing {file}: only regular files are uploaded (symlink or special file)")
            if path == MARKER:
                log.info("skipping %s: the download cache's completion marker", path)
                continue
            if include and not any(fnmatch.fnmatch(path, pattern) for pattern in include):
                continue
            files.append(LocalFile(path, file, file.stat().st_size))
    if not files:
        raise LoaderError(f"no files under {dest}" + (f" matching {list(include)}" if include else ""))
    return files


def crc32_b64(path: Path) -> str:
    """The file's CRC32 as S3 writes it: base64 of the big-endian 4 bytes."""
    value = 0
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            value = zlib.crc32(chunk, value)
    return base64.b64encode(value.to_bytes(4, "big")).decode()


def _head(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        head: dict[str, Any] = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    return head


def _upload_all(
    s3: Any, bucket: str, prefix: str, files: Sequence[LocalFile], workers: int
) -> tuple[int, int, dict[str, str]]:
    """(uploaded, checksums verified, each file's CRC32); raises ``LoaderError`` naming the first file that failed."""
    config = TransferConfig(
        multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=RANGES_PER_FILE
    )

    def one(f: LocalFile) -> tuple[bool, bool, str]:
        key = prefix + f.path
        try:
            relative_path(prefix, key)  # a name the download side would refuse (a backslash) fails here
            crc = crc32_b64(f.file)
            head = _head(s3, bucket, key)
            same_size = head is not None and int(head["ContentLength"]) == f.size
            if same_size and full_object_checksum(head or {}) == ("ChecksumCRC32", crc):
                log.info("%s: %d bytes, unchanged in S3 (size and CRC32 match), skipped", f.path, f.size)
                return False, True, crc
            # A single PUT: the SDK computes the CRC32 of what it sends and S3 checks it. Multipart:
            # our CRC32 of the whole file goes with CompleteMultipartUpload as a FULL_OBJECT checksum
            # (a SHA-256 would be a checksum of parts, which the download side cannot recompute).
            extra = {"ChecksumCRC32": crc} if f.size >= config.multipart_threshold else {"ChecksumAlgorithm": "CRC32"}
            s3.upload_file(str(f.file), bucket, key, ExtraArgs=extra, Config=config)
            head = _head(s3, bucket, key)
            if head is None or int(head["ContentLength"]) != f.size:
                got = None if head is None else head["ContentLength"]
                raise LoaderError(f"size in S3 after upload is {got}, local file has {f.size}")
            stored = full_object_checksum(head)
            if stored is None:
                log.warning("%s: S3 stored no full-object checksum; downloads will check its size only", f.path)
            elif stored != ("ChecksumCRC32", crc):
                raise LoaderError(f"S3 holds {stored[0][len('Checksum') :]} {stored[1]}, local CRC32 is {crc}")
        except (LoaderError, BotoCoreError, ClientError, Boto3Error, OSError) as exc:
            log.error("%s: upload to s3://%s/%s failed: %s", f.path, bucket, key, exc)
            raise LoaderError(f"{f.path}: upload failed: {exc}") from exc
        log.info("%s: %d bytes uploaded%s", f.path, f.size, ", CRC32 ok" if stored else "")
        return True, stored is not None, crc

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="upload")
    try:
        futures = {pool.submit(one, f): f.path for f in files}
        uploaded = verified = 0
        crcs: dict[str, str] = {}
        for future in as_completed(futures):
            did_upload, did_verify, crcs[futures[future]] = future.result()  # the first failure raises here
            uploaded += did_upload
            verified += did_verify
        return uploaded, verified, crcs
    finally:
        # On failure, start no further file; those in flight finish (and log their own failures).
        pool.shutdown(wait=True, cancel_futures=True)


def upload(s3: Any, source: str, dest: Path, *, include: Sequence[str] = (), workers: int = 8) -> UploadResult:
    """Copy every regular file under ``dest`` to ``source``, each with a full-object CRC32."""
    started = time.monotonic()
    bucket, prefix = parse_s3_uri(source)
    dest = dest.absolute()
    files = local_files(dest, include)
    marker = prefix + STORE_MARKER
    try:
        s3.put_object(Bucket=bucket, Key=marker, Body=json.dumps(UPLOADING).encode())  # not whole until the end
        uploaded, verified, crcs = _upload_all(s3, bucket, prefix, files, workers)
        manifest = {"files": {f.path: {"size": f.size, "crc32": crcs[f.path]} for f in files}}
        s3.put_object(Bucket=bucket, Key=marker, Body=json.dumps(manifest, indent=1, sort_keys=True).encode())
    except (BotoCoreError, ClientError) as exc:
        log.error("upload incomplete: %s may hold part of the set; re-run to finish (unchanged files skip)", source)
        raise LoaderError(f"{marker}: {exc}") from exc
    except LoaderError:
        log.error("upload incomplete: %s may hold part of the set; re-run to finish (unchanged files skip)", source)
        raise
    total = sum(f.size for f in files)
    seconds = round(time.monotonic() - started, 3)
    return UploadResult(
        "uploaded", source, str(dest), len(files), total, uploaded, len(files) - uploaded, verified, seconds
    )


@dataclass(frozen=True)
class ProbeResult:
    status: str
    """``present`` (an upload finished under ``source``: ``marker`` written) or ``absent``."""
    source: str
    marker: str
    files: int


def probe(s3: Any, source: str, marker: Path, *, include: Sequence[str] = ()) -> ProbeResult:
    """Write ``marker`` if an upload finished under ``source``: the engine-build Job's first step, after which its
    other steps (``--unless marker``) do nothing. A finished upload whose files changed since raises ``LoaderError``."""
    finished = finished_upload(s3, source, include)
    if finished is None:
        return ProbeResult("absent", source, str(marker), 0)
    marker.write_text(json.dumps({"source": source, "files": len(finished)}) + "\n")
    return ProbeResult("present", source, str(marker), len(finished))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--source", required=True, help="s3://bucket/prefix of the model folder")
    parser.add_argument("--dest", type=Path, help="node-local folder to fill (read with --upload); not with --probe")
    parser.add_argument(
        "--upload", action="store_true", help="the reverse direction: copy the files under --dest to --source"
    )
    parser.add_argument(
        "--include", action="append", default=[], metavar="GLOB", help="only paths matching (repeatable)"
    )
    parser.add_argument("--workers", type=int, default=8, help="files transferred in parallel")
    parser.add_argument("--lock-timeout-s", type=float, default=1800.0, help="how long to wait for another loader")
    parser.add_argument("--region", default=None, help="AWS region (default: the SDK's chain)")
    parser.add_argument(
        "--require-finished-upload",
        action="store_true",
        help=f"sync only a set an upload finished ({STORE_MARKER} under --source), exactly the files it names",
    )
    parser.add_argument(
        "--probe",
        type=Path,
        metavar="FILE",
        help="transfer nothing: write FILE if an upload finished under --source (exit 0 either way)",
    )
    parser.add_argument(
        "--unless", type=Path, metavar="FILE", help="do nothing (status skipped, exit 0) if FILE exists"
    )
    args = parser.parse_args(argv)
    if args.dest is None and args.probe is None:
        parser.error("--dest is required (except with --probe)")
    if args.unless is not None and args.unless.exists():
        # The engine-build Job's steps after its probe found the engine in the store already: nothing to build.
        print(json.dumps({"status": "skipped", "reason": f"{args.unless} exists"}, sort_keys=True), flush=True)
        return 0

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    os.umask(0o022)  # the server container may run as another user: files must be world-readable
    s3 = boto3.client(
        "s3",
        region_name=args.region,
        config=Config(
            retries={"mode": "adaptive", "max_attempts": 10},
            max_pool_connections=args.workers * RANGES_PER_FILE,
        ),
    )
    result: SyncResult | UploadResult | ProbeResult
    try:
        if args.probe is not None:
            result = probe(s3, args.source, args.probe, include=args.include)
        elif args.upload:
            result = upload(s3, args.source, args.dest, include=args.include, workers=args.workers)
        else:
            result = sync(
                s3,
                args.source,
                args.dest,
                include=args.include,
                workers=args.workers,
                lock_timeout_s=args.lock_timeout_s,
                require_finished_upload=args.require_finished_upload,
            )
    except LockTimeout as exc:
        log.error("%s", exc)
        return EXIT_LOCK_TIMEOUT
    except (LoaderError, BotoCoreError, ClientError) as exc:
        log.error("%s", exc)
        return EXIT_FAILED
    print(json.dumps(asdict(result), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
