"""``build --out`` and the ledger under faults (docs/faults.md): never destroy a file, refuse
before any work what can be refused, and say plainly when ε was charged for a build that failed.

Each test checks the property: the bytes of the file that must survive, whether the model was
loaded or ran a forward pass at all, and what the ledger holds.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time

import pytest
from click.testing import CliRunner

import dpmtv.models.loading
import dpmtv.pipeline.build
from dpmtv.cli import main
from tests.cli.test_cli_ledger import _build, _init, _show, forward_calls  # noqa: F401 (fixture)


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def model_loads(monkeypatch):
    """Counts model loads (a refusal "before any work" must not load the model)."""
    calls = []
    original = dpmtv.models.loading.load_model

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(dpmtv.models.loading, "load_model", counting)
    return calls


def _ledger(runner, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    _init(runner, ledger, "clinic", 10)
    return ledger


@pytest.mark.parametrize("target", ["ledger", "records", "image", "text", "folder", "fifo"])
@pytest.mark.parametrize("force", [False, True])
def test_out_never_replaces_a_file_that_is_not_an_artifact(
    runner, tiny_llava_path, records_file, tmp_path, model_loads, target, force
):
    ledger = _ledger(runner, tmp_path)
    out = {
        "ledger": ledger,
        "records": records_file,
        "image": records_file.parent / "img" / "0.png",
        "text": tmp_path / "notes.txt",
        "folder": tmp_path / "folder",
        "fifo": tmp_path / "pipe",
    }[target]
    if target == "text":
        out.write_text("my thesis")
    elif target == "folder":
        out.mkdir()
    elif target == "fifo":
        os.mkfifo(out)
    before = out.read_bytes() if out.is_file() else None
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0", "--dataset", "clinic")
    args += ["--ledger", str(ledger), *(["--force"] if force else [])]
    result = runner.invoke(main, args)
    assert result.exit_code == 2, result.output
    assert str(out) in result.output and "Traceback" not in result.output
    assert model_loads == []
    if before is not None:
        assert out.read_bytes() == before
    assert out.is_dir() == (target == "folder") and stat.S_ISFIFO(os.stat(out).st_mode) == (target == "fifo")
    assert _show(runner, ledger, "clinic")["charges"] == []


def test_an_existing_artifact_is_replaced_only_with_force(
    runner, tiny_llava_path, records_file, tmp_path, model_loads
):
    out = tmp_path / "v.safetensors"
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0")
    assert runner.invoke(main, args).exit_code == 0
    first = out.read_bytes()
    loads = len(model_loads)
    result = runner.invoke(main, args)
    assert result.exit_code == 2 and "--force" in result.output
    assert out.read_bytes() == first and len(model_loads) == loads
    result = runner.invoke(main, [*args, "--force"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() != first  # fresh noise


def test_artifacts_take_the_umask_default_mode(runner, tiny_llava_path, records_file, tmp_path):
    out = tmp_path / "v.safetensors"
    previous = os.umask(0o022)
    try:
        result = runner.invoke(main, _build(tiny_llava_path, records_file, out, "--heads", "layers:0"))
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_an_unwritable_output_location_is_refused_before_any_forward_pass(
    runner,
    tiny_llava_path,
    records_file,
    tmp_path,
    forward_calls,  # noqa: F811
):
    ledger = _ledger(runner, tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    out = blocker / "v.safetensors"  # its folder cannot exist: a file is in the way
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0", "--dataset", "clinic")
    result = runner.invoke(main, [*args, "--ledger", str(ledger)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and str(blocker) in result.output
    assert forward_calls == [] and _show(runner, ledger, "clinic")["charges"] == []


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_write_that_fails_after_the_charge_says_that_epsilon_was_charged(
    runner, tiny_llava_path, records_file, tmp_path, monkeypatch, failure
):
    ledger = _ledger(runner, tmp_path)
    out = tmp_path / "v.safetensors"

    def failing_save(vector, path, **options):
        raise failure

    monkeypatch.setattr(dpmtv.pipeline.build, "save_task_vector", failing_save)
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0", "--dataset", "clinic")
    result = runner.invoke(main, [*args, "--ledger", str(ledger)])
    assert result.exit_code != 0 and not out.exists()
    charges = _show(runner, ledger, "clinic")["charges"]
    assert len(charges) == 1  # the charge stands: noise was drawn
    assert "was charged" in result.output and "clinic" in result.output, result.output
    assert "Traceback" not in result.output


def test_a_locked_ledger_is_waited_for_with_a_message_and_a_bound(
    runner,
    tiny_llava_path,
    records_file,
    tmp_path,
    forward_calls,  # noqa: F811
):
    ledger = _ledger(runner, tmp_path)
    holder = sqlite3.connect(ledger, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process is writing
    try:
        args = _build(tiny_llava_path, records_file, tmp_path / "v.safetensors", "--heads", "layers:0")
        args += ["--dataset", "clinic", "--ledger", str(ledger), "--ledger-timeout", "0.5"]
        started = time.monotonic()
        result = runner.invoke(main, args)
        waited_s = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 1, result.output
    assert "waiting" in result.output and "--ledger-timeout" in result.output
    assert forward_calls == [] and waited_s < 60
    assert _show(runner, ledger, "clinic")["charges"] == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_ledger_is_refused_before_any_forward_pass(
    runner,
    tiny_llava_path,
    records_file,
    tmp_path,
    forward_calls,  # noqa: F811
):
    ledger = _ledger(runner, tmp_path)
    ledger.chmod(0o444)
    args = _build(tiny_llava_path, records_file, tmp_path / "v.safetensors", "--heads", "layers:0")
    result = runner.invoke(main, [*args, "--dataset", "clinic", "--ledger", str(ledger)])
    assert result.exit_code == 2 and "read-only" in result.output, result.output
    assert forward_calls == []


def test_stale_temporaries_of_our_naming_are_removed(tmp_path):
    from dpmtv.cli._output_path import remove_stale_temporaries

    old = time.time() - 3600
    stale = tmp_path / ".v.safetensors.ab_cd123.tmp"
    fresh = tmp_path / ".w.safetensors.xy_zw987.tmp"  # another build may be writing it now
    foreign = tmp_path / ".cache.tmp"  # not our naming
    for path in (stale, fresh, foreign):
        path.write_bytes(b"partial")
    for path in (stale, foreign):
        os.utime(path, (old, old))
    remove_stale_temporaries(tmp_path)
    assert not stale.exists() and fresh.exists() and foreign.exists()


def test_a_build_removes_stale_temporaries_in_its_output_folder(
    runner, tiny_llava_path, records_file, tmp_path
):
    stale = tmp_path / ".old.safetensors.k3j2h1g0.tmp"
    stale.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    result = runner.invoke(
        main, _build(tiny_llava_path, records_file, tmp_path / "v.safetensors", "--heads", "layers:0")
    )
    assert result.exit_code == 0, result.output
    assert not stale.exists()


def test_a_failed_write_without_a_ledger_is_one_error_line(
    runner, tiny_llava_path, records_file, tmp_path, monkeypatch
):
    def failing_save(vector, path, **options):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dpmtv.pipeline.build, "save_task_vector", failing_save)
    result = runner.invoke(
        main, _build(tiny_llava_path, records_file, tmp_path / "v.safetensors", "--heads", "layers:0")
    )
    assert result.exit_code == 2 and "No space left on device" in result.output, result.output
    assert "Traceback" not in result.output


@pytest.fixture
def full_filesystem(tmp_path):
    """A real 64 KiB tmpfs, filled so that a new empty file still fits (an inode) but no artifact
    does: the shape of a full disk. Mounting needs root and CAP_SYS_ADMIN; skipped otherwise."""
    import shutil
    import subprocess

    mount_point = tmp_path / "full"
    mount_point.mkdir()
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None:
        pytest.skip("mounting a tiny tmpfs needs root")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        handle = os.open(mount_point / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(handle, b"\0" * 1024)
        except OSError:  # full
            pass
        finally:
            os.close(handle)
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def test_a_full_filesystem_is_refused_before_the_charge_and_any_private_forward_pass(
    runner,
    tiny_llava_path,
    records_file,
    tmp_path,
    full_filesystem,
    forward_calls,  # noqa: F811
):
    ledger = _ledger(runner, tmp_path)
    out = full_filesystem / "v.safetensors"
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0", "--dataset", "clinic")
    result = runner.invoke(main, [*args, "--ledger", str(ledger)])
    assert result.exit_code == 2, result.output
    assert "no room for the artifact" in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output and not out.exists()
    assert forward_calls == [] and _show(runner, ledger, "clinic")["charges"] == []
    assert sorted(p.name for p in full_filesystem.iterdir()) == ["filler"]  # no temporary left


def test_the_space_check_refuses_more_than_the_free_space(tmp_path):
    from dpmtv.cli._output_path import check_output_space
    from dpmtv.errors import ParameterError

    usage = os.statvfs(tmp_path)
    too_much = usage.f_bavail * usage.f_frsize + 2**30
    with pytest.raises(ParameterError, match="no room for the artifact"):
        check_output_space(tmp_path / "v.safetensors", too_much)
    check_output_space(tmp_path / "v.safetensors", 4096)  # room: passes and leaves nothing
    assert list(tmp_path.iterdir()) == []


def test_the_size_bound_covers_a_real_artifact(runner, tiny_llava_path, records_file, tmp_path):
    from dpmtv.cli._output_path import artifact_size_bound
    from dpmtv.models.loading import load_model

    out = tmp_path / "v.safetensors"
    result = runner.invoke(
        main, _build(tiny_llava_path, records_file, out, "--heads", "all", "--center", "blank")
    )
    assert result.exit_code == 0, result.output
    geometry = load_model(tiny_llava_path).adapter.geometry
    num_heads = geometry.num_layers * geometry.num_heads
    bound = artifact_size_bound(num_heads=num_heads, head_dim=geometry.head_dim, centered=True)
    assert out.stat().st_size <= bound


def test_a_disk_filled_after_the_space_check_says_the_charge_stands_in_one_line(
    runner, tiny_llava_path, records_file, tmp_path, full_filesystem, monkeypatch
):
    """Another writer may fill the disk between the check and the write: the charge stands and
    the message says so, as one error line (safetensors' own I/O error, not a traceback)."""
    import dpmtv.cli.build

    monkeypatch.setattr(dpmtv.cli.build, "check_output_space", lambda out, num_bytes: None)  # the race
    ledger = _ledger(runner, tmp_path)
    out = full_filesystem / "v.safetensors"
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0", "--dataset", "clinic")
    result = runner.invoke(main, [*args, "--ledger", str(ledger)])
    assert result.exit_code == 2, result.output
    assert "was charged" in result.output and "No space left" in result.output
    assert len(_show(runner, ledger, "clinic")["charges"]) == 1 and not out.exists()
