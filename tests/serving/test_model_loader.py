"""The model loader against moto S3: verified sync, cache reuse, failure cleanup, and two pods
on one node (two real processes) that must not corrupt the cache."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import multiprocessing
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig

PREFIX = "meta-llama/Llama-3.1-8B-Instruct/hf"
SOURCE = f"s3://models/{PREFIX}"
MiB = 1024 * 1024

# Small stand-ins for a checkpoint: single-part objects carry a full-object checksum (CRC32 is
# boto3's default, SHA-256 when asked); the 6 MiB shard is a multipart upload, whose checksum is
# a checksum of parts.
FILES: dict[str, bytes] = {
    "config.json": json.dumps({"num_hidden_layers": 32}).encode(),
    "tokenizer.json": b'{"model": "bpe"}' * 100,
    "model-00001-of-00002.safetensors": hashlib.sha256(b"shard-1").digest() * 10_000,
    "model-00002-of-00002.safetensors": bytes(range(256)) * (6 * MiB // 256),
}
SINGLE_PART = 3


@pytest.fixture
def bucket(s3: Any) -> Any:
    """The model prefix uploaded the way a real pipeline would: small files by PUT, big by multipart."""
    s3.put_object(Bucket="models", Key=f"{PREFIX}/config.json", Body=FILES["config.json"])
    s3.put_object(Bucket="models", Key=f"{PREFIX}/tokenizer.json", Body=FILES["tokenizer.json"])
    s3.put_object(
        Bucket="models",
        Key=f"{PREFIX}/model-00001-of-00002.safetensors",
        Body=FILES["model-00001-of-00002.safetensors"],
        ChecksumAlgorithm="SHA256",
    )
    s3.upload_fileobj(
        io.BytesIO(FILES["model-00002-of-00002.safetensors"]),
        "models",
        f"{PREFIX}/model-00002-of-00002.safetensors",
        Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB),
    )
    s3.put_object(Bucket="models", Key=f"{PREFIX}/", Body=b"")  # console-style folder placeholder
    return s3


def assert_complete_copy(dest: Path, loader: ModuleType) -> None:
    assert sorted(p.name for p in dest.iterdir() if p.name != loader.MARKER) == sorted(FILES)
    for name, body in FILES.items():
        assert (dest / name).read_bytes() == body, name
    assert json.loads((dest / loader.MARKER).read_text())["source"] == SOURCE


def leftovers(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}.") and "lock" not in p.name)


# --- one pod ---------------------------------------------------------------------------------


def test_first_pod_downloads_and_verifies_every_file(bucket: Any, loader: ModuleType, tmp_path: Path) -> None:
    # GIVEN an empty node cache WHEN the loader runs
    dest = tmp_path / "cache" / PREFIX
    result = loader.sync(bucket, SOURCE, dest)
    # THEN it downloaded every file intact, checked the three full-object checksums, and marked it done
    assert result.status == "downloaded"
    assert (result.files, result.bytes) == (len(FILES), sum(map(len, FILES.values())))
    assert result.checksums_verified == SINGLE_PART
    assert_complete_copy(dest, loader)
    assert leftovers(dest) == []


def test_second_pod_reuses_the_cache_without_calling_s3(bucket: Any, loader: ModuleType, tmp_path: Path) -> None:
    # GIVEN a node whose cache is complete
    dest = tmp_path / PREFIX
    loader.sync(bucket, SOURCE, dest)
    # WHEN the next pod's loader runs with no S3 client at all
    result = loader.sync(None, SOURCE, dest)
    # THEN it answers from the marker: nothing downloaded, same totals
    assert result.status == "cached"
    assert result.files == len(FILES)


def test_include_patterns_limit_the_sync(bucket: Any, loader: ModuleType, tmp_path: Path) -> None:
    # GIVEN a Triton pod that needs only the tokenizer files of the checkpoint
    dest = tmp_path / "tok"
    # WHEN it syncs with include patterns THEN only those files land
    loader.sync(bucket, SOURCE, dest, include=["tokenizer*", "config.json"])
    assert sorted(p.name for p in dest.iterdir() if p.name != loader.MARKER) == ["config.json", "tokenizer.json"]


def test_a_different_source_replaces_the_cached_copy(bucket: Any, loader: ModuleType, tmp_path: Path) -> None:
    # GIVEN a cache filled from another source (an older model version)
    dest = tmp_path / PREFIX
    loader.sync(bucket, SOURCE, dest, include=["config.json"])
    # WHEN the loader runs for the full source THEN it downloads again and the folder is whole
    assert loader.sync(bucket, SOURCE, dest).status == "downloaded"
    assert_complete_copy(dest, loader)
    assert leftovers(dest) == []


def test_a_file_missing_from_the_cache_triggers_a_resync(bucket: Any, loader: ModuleType, tmp_path: Path) -> None:
    # GIVEN a complete cache from which someone deleted a shard
    dest = tmp_path / PREFIX
    loader.sync(bucket, SOURCE, dest)
    (dest / "model-00001-of-00002.safetensors").unlink()
    # WHEN the loader runs THEN it does not trust the marker: it downloads again
    assert loader.sync(bucket, SOURCE, dest).status == "downloaded"
    assert_complete_copy(dest, loader)


def test_leftovers_of_a_crashed_loader_are_cleaned_and_a_partial_folder_replaced(
    bucket: Any, loader: ModuleType, tmp_path: Path
) -> None:
    # GIVEN a temp folder from a loader that died, and a destination without a marker
    dest = tmp_path / PREFIX
    dest.mkdir(parents=True)
    (dest / "model-00001-of-00002.safetensors").write_bytes(b"half a shard")
    (dest.parent / f".{dest.name}.tmp-999-deadbeef").mkdir()
    # WHEN the loader runs
    loader.sync(bucket, SOURCE, dest)
    # THEN the destination is a complete copy and nothing else is left beside it
    assert_complete_copy(dest, loader)
    assert leftovers(dest) == []


def test_truncated_download_fails_and_leaves_nothing_behind(
    bucket: Any, loader: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a network that cuts one shard short
    real_download = bucket.download_file

    def short_download(bucket_name: str, key: str, filename: str, Config: Any = None) -> None:
        real_download(bucket_name, key, filename, Config=Config)
        if key.endswith("00002-of-00002.safetensors"):
            os.truncate(filename, 3)

    monkeypatch.setattr(bucket, "download_file", short_download)
    dest = tmp_path / PREFIX
    # WHEN the loader runs THEN it fails naming the file and both sizes, and writes no destination
    with pytest.raises(loader.LoaderError, match=r"model-00002-of-00002.safetensors: size 3 bytes, S3 says 6291456"):
        loader.sync(bucket, SOURCE, dest)
    assert not dest.exists()
    assert leftovers(dest) == []


def test_corrupted_download_fails_the_checksum(
    bucket: Any, loader: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a shard whose bytes flip in transit but whose length is right
    real_download = bucket.download_file

    def flip(bucket_name: str, key: str, filename: str, Config: Any = None) -> None:
        real_download(bucket_name, key, filename, Config=Config)
        if key.endswith("00001-of-00002.safetensors"):
            data = bytearray(Path(filename).read_bytes())
            data[0] ^= 0xFF
            Path(filename).write_bytes(bytes(data))

    monkeypatch.setattr(bucket, "download_file", flip)
    # WHEN the loader runs THEN S3's SHA-256 catches it
    with pytest.raises(loader.LoaderError, match="SHA256"):
        loader.sync(bucket, SOURCE, tmp_path / PREFIX)
    assert not (tmp_path / PREFIX).exists()


def test_a_key_that_escapes_the_destination_is_refused(bucket: Any, loader: ModuleType, tmp_path: Path) -> None:
    # GIVEN an object key with a `..` segment under the model prefix
    bucket.put_object(Bucket="models", Key=f"{PREFIX}/../../../etc/cron.d/x", Body=b"evil")
    # WHEN the loader lists the prefix THEN it refuses before writing anything
    with pytest.raises(loader.LoaderError, match="would leave the destination"):
        loader.sync(bucket, SOURCE, tmp_path / PREFIX)
    assert not (tmp_path / PREFIX).exists()


def test_empty_prefix_fails_with_a_one_line_error(
    bucket: Any, loader: ModuleType, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a source URI with a typo WHEN the CLI runs THEN it exits 1 and says nothing is there
    with caplog.at_level(logging.ERROR, logger="model-loader"):
        code = loader.main(["--source", "s3://models/meta-llama/Llama-3.1-8B", "--dest", str(tmp_path / "x")])
    assert code == 1
    assert "no objects under s3://models/meta-llama/Llama-3.1-8B" in caplog.text


def test_cli_prints_one_json_line(
    bucket: Any, loader: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the CLI WHEN it succeeds THEN stdout is one JSON object the init container can log
    assert loader.main(["--source", SOURCE, "--dest", str(tmp_path / PREFIX)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["status"] == "downloaded"


def test_lock_held_too_long_exits_3(bucket: Any, loader: ModuleType, tmp_path: Path) -> None:
    # GIVEN another loader holding the node's lock for this model
    dest = tmp_path / PREFIX
    dest.parent.mkdir(parents=True)
    fd = os.open(dest.parent / f".{dest.name}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        # WHEN this loader's wait runs out THEN it exits 3 and has written nothing
        code = loader.main(["--source", SOURCE, "--dest", str(dest), "--lock-timeout-s", "0.3"])
    finally:
        os.close(fd)
    assert code == 3
    assert not dest.exists()


# --- checksum rules --------------------------------------------------------------------------


def test_composite_checksums_are_not_compared(loader: ModuleType) -> None:
    # GIVEN HEAD answers for multipart objects WHEN the usable checksum is picked THEN there is none
    assert loader.full_object_checksum({"ChecksumCRC32": "abc=", "ChecksumType": "COMPOSITE"}) is None
    assert loader.full_object_checksum({"ChecksumSHA256": "abc=-3"}) is None
    assert loader.full_object_checksum({"ChecksumCRC32": "abc=", "ETag": '"0123-2"'}) is None


def test_full_object_checksums_are_compared(loader: ModuleType) -> None:
    # GIVEN a full-object CRC32 (also for a multipart upload) WHEN picked THEN it is used
    assert loader.full_object_checksum({"ChecksumCRC32": "abc=", "ChecksumType": "FULL_OBJECT", "ETag": '"x-2"'}) == (
        "ChecksumCRC32",
        "abc=",
    )


# --- two pods on one node (two real processes) -----------------------------------------------


def _run_cli(loader: ModuleType, argv: list[str], out: Path) -> None:
    # Runs in a forked child: the moto mock and the fake credentials come with the fork.
    with out.open("w") as stdout, contextlib.redirect_stdout(stdout):
        code = loader.main(argv)
    raise SystemExit(code)


def _start_two(loader: ModuleType, dest: Path, tmp_path: Path) -> list[tuple[Any, Path]]:
    ctx = multiprocessing.get_context("fork")
    procs = []
    for i in range(2):
        out = tmp_path / f"pod-{i}.json"
        p = ctx.Process(target=_run_cli, args=(loader, ["--source", SOURCE, "--dest", str(dest)], out))
        p.start()
        procs.append((p, out))
    return procs


def _finish(procs: list[tuple[Any, Path]]) -> list[str]:
    statuses = []
    for p, out in procs:
        p.join(timeout=60)
        assert p.exitcode == 0, f"loader process exited {p.exitcode}"
        statuses.append(json.loads(out.read_text())["status"])
    return sorted(statuses)


def test_second_pod_waits_for_the_first_and_then_reuses_its_copy(
    bucket: Any, loader: ModuleType, tmp_path: Path
) -> None:
    # GIVEN the node lock held (as by a loader mid-download) while two pods start
    dest = tmp_path / "node" / PREFIX
    dest.parent.mkdir(parents=True)
    fd = os.open(dest.parent / f".{dest.name}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    procs = _start_two(loader, dest, tmp_path)
    try:
        # WHEN they have had time to run THEN both are waiting and nothing is in place yet
        time.sleep(0.5)
        assert all(p.is_alive() for p, _ in procs)
        assert not dest.exists()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)  # explicit: the children share this descriptor
        os.close(fd)
    # AND once the lock is free, exactly one downloads and the other finds its marker
    assert _finish(procs) == ["cached", "downloaded"]
    assert_complete_copy(dest, loader)
    assert leftovers(dest) == []


def test_two_pods_racing_leave_one_verified_copy(bucket: Any, loader: ModuleType, tmp_path: Path) -> None:
    # GIVEN an empty node cache WHEN two loader processes start at the same moment
    dest = tmp_path / "node" / PREFIX
    statuses = _finish(_start_two(loader, dest, tmp_path))
    # THEN both succeed, the bucket was downloaded once, and the copy is whole
    assert statuses == ["cached", "downloaded"]
    assert_complete_copy(dest, loader)
    assert leftovers(dest) == []
