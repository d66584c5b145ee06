"""strata.aio.aio_handle with DeepNVMe's semantics (the DeepNVMe tutorial's calls: sync and async
reads and writes of a tensor, wait()'s count, page-locked tensors), strata's additions (OSError
with errno, path and offset; CRC32C checks; DeepSpeed's -1 on request), and the faults: a full
tmpfs and a read-only bind mount made by the test (as root), a CUDA tensor, a corrupted file."""

import contextlib
import errno
import os
import subprocess
import threading

import pytest
import torch

from strata.aio import aio_handle
from strata.optim import CPUAdam

MIB = 1 << 20


def tensor(numel=MIB, seed=0):
    return torch.randn(numel, generator=torch.Generator().manual_seed(seed))


def test_the_defaults_are_deepspeeds():
    handle = aio_handle()
    assert handle.get_block_size() == 1048576
    assert handle.get_queue_depth() == 128
    assert handle.get_single_submit() is False
    assert handle.get_overlap_events() is False
    assert handle.get_intra_op_parallelism() == 1 == handle.get_thread_count()


def test_sync_write_then_read_returns_one_op_each(tmp_path):
    handle = aio_handle()
    data, back = tensor(), torch.empty(MIB)
    path = str(tmp_path / "tensor.bin")
    assert handle.sync_pwrite(data, path) == 1
    assert os.path.getsize(path) == data.numel() * 4
    assert handle.sync_pread(back, path) == 1
    assert torch.equal(back, data)


def test_async_ops_return_zero_and_wait_counts_them(tmp_path):
    handle = aio_handle(intra_op_parallelism=2)
    parts = [tensor(MIB // 4, seed) for seed in range(4)]
    path = str(tmp_path / "parts.bin")
    for index, part in enumerate(parts):
        assert handle.async_pwrite(part, path, index * MIB) == 0
    assert handle.wait() == 4
    whole = torch.empty(MIB)
    assert handle.pread(whole, path, False, True) == 0
    assert handle.wait() == 1
    assert torch.equal(whole, torch.cat(parts))


def test_a_file_descriptor_stands_for_its_file(tmp_path):
    handle = aio_handle()
    path = tmp_path / "by_fd.bin"
    data, back = tensor(seed=4), torch.empty(MIB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert handle.sync_pwrite(data, fd) == 1
        assert handle.sync_pread(back, fd) == 1
    finally:
        os.close(fd)
    assert torch.equal(back, data)
    with pytest.raises(ValueError, match="not open in this process; fix"):
        handle.sync_pread(back, fd)


def test_read_and_write_return_zero_and_validate(tmp_path):
    handle = aio_handle()
    data, back = tensor(seed=1), torch.empty(MIB)
    path = str(tmp_path / "whole.bin")
    assert handle.write(data, path, True) == 0
    assert handle.read(back, path, True) == 0
    assert torch.equal(back, data)


def test_a_locked_tensor_is_aligned_zeroed_and_freed_once(tmp_path):
    handle = aio_handle()
    locked = handle.new_cpu_locked_tensor(MIB, torch.empty(0, dtype=torch.bfloat16))
    assert locked.dtype == torch.bfloat16 and locked.numel() == MIB
    assert locked.data_ptr() % 4096 == 0 and not locked.any()
    data = tensor(seed=2).bfloat16()
    path = str(tmp_path / "bf16.bin")
    assert handle.sync_pwrite(data, path) == 1
    assert handle.sync_pread(locked, path) == 1
    assert torch.equal(locked, data)
    assert handle.free_cpu_locked_tensor(locked) is True
    assert handle.free_cpu_locked_tensor(locked) is False
    assert handle.free_cpu_locked_tensor(data) is False


def test_failed_validations_return_minus_one_and_say_why(tmp_path, capfd):
    handle = aio_handle(intra_op_parallelism=3)
    path = str(tmp_path / "small.bin")
    assert handle.sync_pwrite(torch.zeros(3 * 1024), path) == 1  # 12 KiB
    assert handle.sync_pwrite(torch.zeros(1200), path) == -1  # 4,800 bytes
    assert "pad the buffer and the offset to multiples of 4096" in capfd.readouterr().err
    assert handle.sync_pread(torch.zeros(3 * 1024), str(tmp_path / "missing.bin")) == -1
    assert "does not exist" in capfd.readouterr().err
    assert handle.sync_pread(torch.zeros(3 * 1024), path, 4096) == -1
    assert "read no further than the end of the file" in capfd.readouterr().err
    assert handle.sync_pread(torch.zeros(1024), path) == -1
    assert "intra_op_parallelism=3" in capfd.readouterr().err


class ReportsCuda(torch.Tensor):
    """A CPU tensor that reports a CUDA device, as a GPU tensor would where torch has none."""

    @property
    def device(self):
        return torch.device("cuda", 0)


def test_a_cuda_tensor_is_a_value_error_naming_the_buffer(tmp_path):
    with pytest.raises(ValueError, match="the buffer is on cuda:0.*fix"):
        aio_handle().sync_pwrite(torch.zeros(1024).as_subclass(ReportsCuda),
                                 str(tmp_path / "x.bin"))


def test_verify_catches_a_corrupted_sector(tmp_path):
    handle = aio_handle(verify=True)
    path = str(tmp_path / "checked.bin")
    assert handle.sync_pwrite(tensor(seed=3), path) == 1
    assert os.path.exists(path + ".crc32c")
    with open(path, "r+b") as file:
        file.seek(5 * 4096 + 7)
        file.write(b"\xff")
    with pytest.raises(OSError) as raised:
        handle.sync_pread(torch.empty(MIB), path)
    assert raised.value.errno == errno.EBADMSG
    assert raised.value.filename == path
    assert "offset 20480" in str(raised.value)
    assert aio_handle(verify=True, return_codes=True).sync_pread(torch.empty(MIB), path) == -1


@contextlib.contextmanager
def mounted(args, target):
    """Mounts with `mount args target` for the test, or skips it where this process may not."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only bind needs root")
    made = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mount refused here: {made.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_a_full_disk_is_an_oserror_with_enospc(tmp_path):
    target = tmp_path / "small"
    target.mkdir()
    with mounted(["-t", "tmpfs", "-o", "size=1m", "tmpfs"], target):
        path = str(target / "big.bin")
        with pytest.raises(OSError) as raised:
            aio_handle().sync_pwrite(tensor(2 * MIB), path)
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == path
        assert aio_handle(return_codes=True).sync_pwrite(tensor(2 * MIB), path) == -1


def test_a_read_only_directory_is_an_oserror_with_erofs(tmp_path):
    source, target = tmp_path / "source", tmp_path / "read_only"
    source.mkdir()
    target.mkdir()
    with mounted(["--bind", "-o", "ro", str(source)], target):
        path = str(target / "x.bin")
        with pytest.raises(OSError) as raised:
            aio_handle().sync_pwrite(tensor(), path)
        assert raised.value.errno == errno.EROFS and raised.value.filename == path
        assert aio_handle(return_codes=True).sync_pwrite(tensor(), path) == -1


def test_io_and_a_step_run_in_two_python_threads_at_once(tmp_path):
    grads = [tensor(300_000, seed) for seed in range(5)]
    expected = torch.nn.Parameter(tensor(300_000, 9))
    alone = CPUAdam([expected])
    for grad in grads:
        expected.grad = grad
        alone.step()
    param = torch.nn.Parameter(tensor(300_000, 9))
    data = [tensor(MIB, seed) for seed in range(4)]
    read_back = []

    def io():
        handle = aio_handle()
        for index, part in enumerate(data):
            path = str(tmp_path / f"part{index}.bin")
            assert handle.sync_pwrite(part, path) == 1
            back = torch.empty(MIB)
            assert handle.sync_pread(back, path) == 1
            read_back.append(back)

    def step():
        optimizer = CPUAdam([param])
        for grad in grads:
            param.grad = grad
            optimizer.step()

    workers = [threading.Thread(target=io), threading.Thread(target=step)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert all(torch.equal(a, b) for a, b in zip(read_back, data)) and len(read_back) == 4
    assert torch.equal(param.detach(), expected.detach())


def test_any_dtype_moves_and_settings_are_checked(tmp_path):
    handle = aio_handle()
    raw = torch.arange(8192, dtype=torch.int32).view(torch.uint8)
    back = handle.new_cpu_locked_tensor(raw.numel(), raw)
    path = str(tmp_path / "bytes.bin")
    assert handle.sync_pwrite(raw, path) == 1 and handle.sync_pread(back, path) == 1
    assert torch.equal(back, raw)
    with pytest.raises(ValueError, match="block_size=1000.*fix"):
        aio_handle(block_size=1000)
    with pytest.raises(ValueError, match="queue_depth=0.*fix"):
        aio_handle(queue_depth=0)


def test_verified_writes_in_flight_to_one_file_keep_their_checksums(tmp_path):
    handle = aio_handle(verify=True)
    path = str(tmp_path / "two_writes.bin")
    halves = [tensor(MIB // 2, 5), tensor(MIB // 2, 6)]
    assert handle.async_pwrite(halves[0], path, 0) == 0
    assert handle.async_pwrite(halves[1], path, 2 * MIB) == 0
    assert handle.wait() == 2
    whole = torch.empty(MIB)
    assert aio_handle(verify=True).sync_pread(whole, path) == 1
    assert torch.equal(whole, torch.cat(halves))
