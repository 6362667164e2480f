"""The model loader's upload mode (engine-build Job -> S3) against moto: round trip with verified
checksums, idempotent re-runs, refusal of an empty folder, and failures that exit 1."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from boto3.exceptions import S3UploadFailedError

PREFIX = "meta-llama/Llama-3.1-8B-Instruct/trtllm/h200-fp8-tp2-pp1-ultra-low-latency"
SOURCE = f"s3://models/{PREFIX}"
MiB = 1024 * 1024
PART = 5 * MiB  # S3's smallest part: a 6 MiB file is a two-part multipart upload
FINISHED = f"{PREFIX}/.inferstack-upload-complete.json"
"""What an upload writes after its last file: the set there is whole."""

# Stand-ins for what `trtllm-build` writes: a config, one engine per rank (rank0 is multipart
# here), and a nested file to exercise relative paths.
ENGINE: dict[str, bytes] = {
    "config.json": json.dumps({"pretrained_config": {"mapping": {"tp_size": 2}}}).encode(),
    "rank0.engine": bytes(range(256)) * (6 * MiB // 256),
    "rank1.engine": os.urandom(300_000),
    "timing/cache.bin": b"\x00\x01" * 5000,
}


@pytest.fixture
def engine_dir(tmp_path: Path) -> Path:
    root = tmp_path / "engine"
    for rel, body in ENGINE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)
    return root


@pytest.fixture
def small_parts(loader: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """64 MiB parts would make every test file a single PUT; 5 MiB parts make rank0 multipart."""
    monkeypatch.setattr(loader, "PART_BYTES", PART)


def keys(s3: Any) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket="models").get("Contents", []))


def record_uploads(s3: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Spy on the client's managed uploads; returns the list of keys it is asked to write."""
    calls: list[str] = []
    real = s3.upload_file

    def spy(filename: str, bucket: str, key: str, ExtraArgs: Any = None, Config: Any = None) -> None:
        calls.append(key.removeprefix(f"{PREFIX}/"))
        real(filename, bucket, key, ExtraArgs=ExtraArgs, Config=Config)

    monkeypatch.setattr(s3, "upload_file", spy)
    return calls


def test_upload_then_download_round_trips_with_verified_checksums(
    s3: Any,
    loader: ModuleType,
    engine_dir: Path,
    tmp_path: Path,
    small_parts: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN an engine folder written by trtllm-build
    # WHEN the CLI uploads it
    assert loader.main(["--upload", "--dest", str(engine_dir), "--source", SOURCE, "--workers", "2"]) == 0
    # THEN stdout is one JSON line saying every file went up with its CRC32 confirmed by S3
    (line,) = capsys.readouterr().out.splitlines()
    summary = json.loads(line)
    assert summary["status"] == "uploaded"
    assert (summary["files"], summary["uploaded"], summary["skipped"]) == (len(ENGINE), len(ENGINE), 0)
    assert summary["bytes"] == sum(map(len, ENGINE.values()))
    assert summary["checksums_verified"] == len(ENGINE)
    assert keys(s3) == sorted([FINISHED, *(f"{PREFIX}/{rel}" for rel in ENGINE)])
    # AND the marker written last names every file with its size and CRC32
    finished = json.loads(s3.get_object(Bucket="models", Key=FINISHED)["Body"].read())["files"]
    assert finished == {
        rel: {"size": len(body), "crc32": loader.crc32_b64(engine_dir / rel)} for rel, body in ENGINE.items()
    }
    # AND the multipart engine carries a full-object checksum, not a checksum of its parts
    head = s3.head_object(Bucket="models", Key=f"{PREFIX}/rank0.engine", ChecksumMode="ENABLED")
    assert head["ETag"].strip('"').endswith("-2")
    assert head["ChecksumType"] == "FULL_OBJECT"
    assert head["ChecksumCRC32"] == loader.crc32_b64(engine_dir / "rank0.engine")

    # WHEN a serving node syncs the prefix back
    dest = tmp_path / "node" / PREFIX
    result = loader.sync(s3, SOURCE, dest, require_finished_upload=True)
    # THEN every file is byte-identical and every one was checked by checksum, not only by size
    assert result.status == "downloaded"
    assert result.checksums_verified == len(ENGINE)
    for rel, body in ENGINE.items():
        assert (dest / rel).read_bytes() == body, rel
    # AND the store's marker is not copied into the engine folder
    assert not (dest / ".inferstack-upload-complete.json").exists()


def test_re_upload_skips_unchanged_files_and_resends_a_changed_one(
    s3: Any, loader: ModuleType, engine_dir: Path, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an engine already uploaded
    loader.upload(s3, SOURCE, engine_dir)
    uploads = record_uploads(s3, monkeypatch)
    # WHEN the Job runs again on the same folder
    again = loader.upload(s3, SOURCE, engine_dir)
    # THEN nothing is sent: every file's size and CRC32 matched
    assert uploads == []
    assert (again.status, again.uploaded, again.skipped) == ("uploaded", 0, len(ENGINE))
    assert again.checksums_verified == len(ENGINE)

    # GIVEN one file rebuilt with the same size but other bytes
    data = bytearray((engine_dir / "rank1.engine").read_bytes())
    data[100] ^= 0xFF
    (engine_dir / "rank1.engine").write_bytes(bytes(data))
    # WHEN the Job runs again THEN exactly that file is sent, and S3 now holds its bytes
    changed = loader.upload(s3, SOURCE, engine_dir)
    assert uploads == ["rank1.engine"]
    assert (changed.uploaded, changed.skipped) == (1, len(ENGINE) - 1)
    assert s3.get_object(Bucket="models", Key=f"{PREFIX}/rank1.engine")["Body"].read() == bytes(data)


@pytest.mark.parametrize("state", ["empty", "missing"])
def test_empty_or_missing_folder_exits_1_and_uploads_nothing(
    s3: Any,
    loader: ModuleType,
    tmp_path: Path,
    state: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a build that wrote nothing (an empty folder, or none at all)
    folder = tmp_path / "engine"
    if state == "empty":
        (folder / "sub").mkdir(parents=True)  # folders alone are not files
    # WHEN the upload runs
    with caplog.at_level(logging.ERROR, logger="model-loader"):
        code = loader.main(["--upload", "--dest", str(folder), "--source", SOURCE])
    # THEN it exits 1 with a one-line reason, prints no summary, and S3 stays empty
    assert code == 1
    assert ("no files under" if state == "empty" else "is not a folder") in caplog.text
    assert capsys.readouterr().out == ""
    assert keys(s3) == []


def test_a_failure_mid_way_exits_1_names_the_file_and_a_re_run_finishes(
    s3: Any,
    loader: ModuleType,
    engine_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN S3 refusing the second engine file of the set (files go one at a time, in path order)
    real = s3.upload_file

    def flaky(filename: str, bucket: str, key: str, ExtraArgs: Any = None, Config: Any = None) -> None:
        if key.endswith("rank0.engine"):
            raise S3UploadFailedError("Failed to upload rank0.engine: An error occurred (SlowDown)")
        real(filename, bucket, key, ExtraArgs=ExtraArgs, Config=Config)

    monkeypatch.setattr(s3, "upload_file", flaky)
    monkeypatch.setattr(loader.boto3, "client", lambda *args, **kwargs: s3)  # the CLI uses the faulty client
    argv = ["--upload", "--dest", str(engine_dir), "--source", SOURCE, "--workers", "1"]
    # WHEN the CLI runs
    with caplog.at_level(logging.ERROR, logger="model-loader"):
        code = loader.main(argv)
    # THEN it exits 1, logs which file failed and that the set is incomplete, and prints no summary
    assert code == 1
    assert f"rank0.engine: upload to s3://models/{PREFIX}/rank0.engine failed" in caplog.text
    assert "upload incomplete" in caplog.text
    assert capsys.readouterr().out == ""
    assert f"{PREFIX}/config.json" in keys(s3)
    assert f"{PREFIX}/rank0.engine" not in keys(s3)
    # AND no marker says the set is whole: a node's loader with --require-finished-upload refuses it
    assert json.loads(s3.get_object(Bucket="models", Key=FINISHED)["Body"].read()) == {"uploading": True}
    with pytest.raises(loader.LoaderError, match="holds no finished upload"):
        loader.sync(s3, SOURCE, tmp_path / "node", require_finished_upload=True)
    assert not (tmp_path / "node").exists()

    # WHEN S3 recovers and the Job is retried
    monkeypatch.setattr(s3, "upload_file", real)
    assert loader.main(argv) == 0
    # THEN the file uploaded before the failure is skipped and the set is now complete
    summary = json.loads(capsys.readouterr().out)
    assert summary["skipped"] >= 1
    assert summary["uploaded"] + summary["skipped"] == len(ENGINE)
    assert keys(s3) == sorted([FINISHED, *(f"{PREFIX}/{rel}" for rel in ENGINE)])


def test_bytes_that_differ_from_the_local_file_fail_the_upload(
    s3: Any, loader: ModuleType, engine_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a file that changes while it is uploaded (S3 receives other bytes of the same length)
    real = s3.upload_file
    other = tmp_path / "other"
    other.write_bytes(b"\xff" * len(ENGINE["config.json"]))

    def changed(filename: str, bucket: str, key: str, ExtraArgs: Any = None, Config: Any = None) -> None:
        source = str(other) if key.endswith("config.json") else filename
        real(source, bucket, key, ExtraArgs=ExtraArgs, Config=Config)

    monkeypatch.setattr(s3, "upload_file", changed)
    # WHEN the upload runs THEN the CRC32 S3 stored disagrees with the local file's and it fails
    with pytest.raises(loader.LoaderError, match=r"config.json: upload failed: S3 holds CRC32 .*, local CRC32 is"):
        loader.upload(s3, SOURCE, engine_dir, workers=1)


def test_include_globs_limit_the_upload(s3: Any, loader: ModuleType, engine_dir: Path) -> None:
    # GIVEN include patterns WHEN the upload runs THEN only the matching files go up
    result = loader.upload(s3, SOURCE, engine_dir, include=["*.json", "timing/*"])
    assert (result.files, result.uploaded) == (2, 2)
    assert keys(s3) == [FINISHED, f"{PREFIX}/config.json", f"{PREFIX}/timing/cache.bin"]


def test_a_symlink_in_the_folder_is_refused(s3: Any, loader: ModuleType, engine_dir: Path, tmp_path: Path) -> None:
    # GIVEN a symlink among the engine files (it could point outside the folder)
    (tmp_path / "secret").write_bytes(b"x")
    (engine_dir / "link.engine").symlink_to(tmp_path / "secret")
    # WHEN the upload runs THEN it refuses before sending anything
    with pytest.raises(loader.LoaderError, match="only regular files"):
        loader.upload(s3, SOURCE, engine_dir)
    assert keys(s3) == []


def test_a_re_run_removes_the_marker_before_it_writes_and_puts_it_back_after(
    s3: Any, loader: ModuleType, engine_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a finished upload
    loader.upload(s3, SOURCE, engine_dir)
    seen: list[bool] = []
    real = s3.upload_file

    def watch(filename: str, bucket: str, key: str, ExtraArgs: Any = None, Config: Any = None) -> None:
        seen.append(loader.finished_upload(s3, SOURCE) is not None)
        real(filename, bucket, key, ExtraArgs=ExtraArgs, Config=Config)

    monkeypatch.setattr(s3, "upload_file", watch)
    # WHEN the build runs again with one file rebuilt
    (engine_dir / "rank1.engine").write_bytes(os.urandom(300_000))
    loader.upload(s3, SOURCE, engine_dir)
    # THEN while it wrote, no marker said the set was whole (overwritten, not deleted: the build's role may not
    # delete objects); afterwards it does again, with the new file's size
    assert seen == [False]
    assert {o.path for o in loader.finished_upload(s3, SOURCE)} == set(ENGINE)


def test_a_marker_naming_a_file_that_changed_is_refused(s3: Any, loader: ModuleType, engine_dir: Path) -> None:
    # GIVEN a finished upload whose rank1 engine someone replaced by a shorter object since
    loader.upload(s3, SOURCE, engine_dir)
    s3.put_object(Bucket="models", Key=f"{PREFIX}/rank1.engine", Body=b"short")
    # THEN a node refuses the set rather than cache it as whole
    with pytest.raises(
        loader.LoaderError, match=r"names 1 file\(s\) missing or of another size there \(rank1.engine\)"
    ):
        loader.finished_upload(s3, SOURCE)


def test_a_marker_that_is_not_a_manifest_is_refused(s3: Any, loader: ModuleType) -> None:
    s3.put_object(Bucket="models", Key=FINISHED, Body=b"not json")
    with pytest.raises(loader.LoaderError, match="is not an upload's manifest"):
        loader.finished_upload(s3, SOURCE)


def test_the_probe_marks_a_finished_upload_and_the_build_steps_then_do_nothing(
    s3: Any,
    loader: ModuleType,
    engine_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(loader.boto3, "client", lambda *args, **kwargs: s3)
    marker = tmp_path / "engine-present"
    # GIVEN no engine in the store: the probe writes no marker, and the Job's steps run
    assert loader.main(["--probe", str(marker), "--source", SOURCE]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "absent" and not marker.exists()
    # GIVEN the engine uploaded: the probe writes the marker
    loader.upload(s3, SOURCE, engine_dir)
    assert loader.main(["--probe", str(marker), "--source", SOURCE]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "present" and marker.exists()
    # THEN a step given --unless that marker transfers nothing (its S3 client is never made)
    monkeypatch.setattr(loader.boto3, "client", lambda *args, **kwargs: pytest.fail("no S3 call expected"))
    argv = ["--upload", "--dest", str(tmp_path / "absent"), "--source", SOURCE, "--unless", str(marker)]
    assert loader.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "skipped"
