"""DeepNVMe's aio handle on strata's io_uring engine (docs/python.md).

Code written for DeepSpeed's handle (`AsyncIOBuilder().load().aio_handle(...)`) runs with
`from strata.aio import aio_handle`: the same constructor, methods, arguments and return values.
`wait()` returns how many operations completed; a sync call returns what wait() returns, an async
one 0; a failed validation returns -1 (and says why on stderr, naming the fix).

On top of DeepSpeed's: an I/O error raises OSError with its errno, the path and the offset
(`return_codes=True` asks for DeepSpeed's -1 instead); `verify=True` keeps a CRC32C of every
4 KiB written (strata's swap format, a `<file>.crc32c` sidecar) and checks it on every read;
`new_cpu_locked_tensor` works on CPU-only torch, where `pin_memory()` fails.

strata's engine reads and writes with O_DIRECT, so file offsets and sizes are multiples of
4 KiB; memory that is not 4 KiB aligned (an ordinary tensor) goes through a bounce buffer, and
`new_cpu_locked_tensor`'s is aligned already.
"""

import os
import sys

import torch

from strata import _native
from strata._tensors import check_host_memory

__all__ = ["aio_handle"]

_ALIGNMENT = 4096


class aio_handle:  # noqa: N801 - DeepSpeed's name
    def __init__(self, block_size=1048576, queue_depth=128, single_submit=False,
                 overlap_events=False, intra_op_parallelism=1, verify=False,
                 return_codes=False):
        _check_settings(block_size, queue_depth, intra_op_parallelism)
        self._native = _native.AioHandle(
            block_size=block_size, queue_depth=queue_depth, single_submit=single_submit,
            overlap_events=overlap_events, intra_op_parallelism=intra_op_parallelism,
            verify=verify)
        self._settings = (block_size, queue_depth, single_submit, overlap_events,
                          intra_op_parallelism)
        self._return_codes = return_codes
        self._in_flight = []  # (read, buffer, path, offset, validate): alive until wait()
        self._locked = {}  # data_ptr -> the LockedBuffer under a locked tensor

    def get_block_size(self):
        return self._settings[0]

    def get_queue_depth(self):
        return self._settings[1]

    def get_single_submit(self):
        return self._settings[2]

    def get_overlap_events(self):
        return self._settings[3]

    def get_intra_op_parallelism(self):
        return self._settings[4]

    get_thread_count = get_intra_op_parallelism  # the name before DeepSpeed 0.15

    def read(self, buffer, filename, validate=False, file_offset=0):
        """Reads the buffer's bytes from `filename` at `file_offset`; 0, or -1."""
        done = self.pread(buffer, filename, validate, False, file_offset)
        return -1 if done == -1 else 0

    def write(self, buffer, filename, validate=False, file_offset=0):
        """Writes the buffer to `filename` at `file_offset`; 0, or -1."""
        done = self.pwrite(buffer, filename, validate, False, file_offset)
        return -1 if done == -1 else 0

    def pread(self, buffer, filename, validate, async_op, file_offset=0):
        return self._transfer(True, buffer, filename, validate, async_op, file_offset)

    def pwrite(self, buffer, filename, validate, async_op, file_offset=0):
        return self._transfer(False, buffer, filename, validate, async_op, file_offset)

    def sync_pread(self, buffer, filename, file_offset=0):
        return self.pread(buffer, filename, False, False, file_offset)

    def sync_pwrite(self, buffer, filename, file_offset=0):
        return self.pwrite(buffer, filename, False, False, file_offset)

    def async_pread(self, buffer, filename, file_offset=0):
        return self.pread(buffer, filename, False, True, file_offset)

    def async_pwrite(self, buffer, filename, file_offset=0):
        return self.pwrite(buffer, filename, False, True, file_offset)

    def wait(self):
        """Finishes every operation submitted; returns how many (or -1 after a failure with
        return_codes). Raises OSError for the first failed one otherwise, after all are done."""
        in_flight, self._in_flight = self._in_flight, []
        try:
            done = self._native.wait()
        except OSError:
            if self._return_codes:
                return -1
            raise
        for read, buffer, path, offset, validate in in_flight:
            if validate and not _same_as_file(buffer, path, offset):
                return self._refuse(
                    f"validation: {path} at offset {offset} does not hold the buffer's bytes "
                    f"after the {'read' if read else 'write'}",
                    "check the disk (dmesg), and that no other writer shares the file")
        return done

    def new_cpu_locked_tensor(self, num_elem, example_tensor):
        """A tensor of `num_elem` elements of example_tensor's dtype in page-locked, 4 KiB
        aligned memory (mlock), zeroed."""
        element = torch.empty(0, dtype=example_tensor.dtype).element_size()
        locked = _native.LockedBuffer(num_elem * element)
        tensor = torch.frombuffer(locked, dtype=example_tensor.dtype, count=num_elem) \
            if num_elem > 0 else torch.empty(0, dtype=example_tensor.dtype)
        self._locked[tensor.data_ptr()] = locked
        return tensor

    def free_cpu_locked_tensor(self, tensor):
        """Unlocks a tensor's memory from new_cpu_locked_tensor: True, or False for another
        tensor. The memory itself goes when the last tensor over it does."""
        locked = self._locked.pop(tensor.data_ptr(), None)
        if locked is None:
            return False
        locked.unlock()
        return True

    def _transfer(self, read, buffer, filename, validate, async_op, file_offset):
        check_host_memory(buffer, "the buffer")
        path = _path_of(filename)
        nbytes = buffer.numel() * buffer.element_size()
        refusal = self._validate(read, nbytes, path, file_offset)
        if refusal is not None:
            return self._refuse(*refusal)
        try:
            self._native.submit(read=read, address=buffer.data_ptr(), bytes=nbytes, path=path,
                                offset=file_offset)
        except OSError:
            if self._return_codes:
                return -1
            raise
        self._in_flight.append((read, buffer, path, file_offset, validate))
        return 0 if async_op else self.wait()

    def _validate(self, read, nbytes, path, offset):
        """DeepSpeed's checks and O_DIRECT's: a (cause, fix) to refuse, or None."""
        parallelism = self._settings[4]
        if nbytes % parallelism != 0:
            return (f"{nbytes} bytes do not split over intra_op_parallelism={parallelism}",
                    "give a buffer whose size the parallelism divides")
        if offset % _ALIGNMENT != 0 or nbytes % _ALIGNMENT != 0:
            return (f"{'reading' if read else 'writing'} {nbytes} bytes at offset {offset} of "
                    f"{path}: strata's handle moves whole 4 KiB blocks (O_DIRECT)",
                    "pad the buffer and the offset to multiples of 4096 bytes")
        if read:
            if not os.path.exists(path):
                return (f"{path} does not exist", "write it first, or give the right path")
            size = os.path.getsize(path)
            if offset + nbytes > size:
                return (f"reading {nbytes} bytes at offset {offset} of {path}, which holds "
                        f"{size}", "read no further than the end of the file")
        return None

    def _refuse(self, cause, fix):
        print(f"strata.aio: {cause}; fix: {fix}", file=sys.stderr)
        return -1


def _check_settings(block_size, queue_depth, intra_op_parallelism):
    """The engine's ranges, named by this constructor's keywords."""
    def count(value):
        return isinstance(value, int) and not isinstance(value, bool)
    if not count(block_size) or block_size < _ALIGNMENT or block_size % _ALIGNMENT:
        raise ValueError(f"block_size={block_size!r}: give a positive multiple of 4096 bytes; "
                         f"fix: block_size=1048576, the default")
    if not count(queue_depth) or not 1 <= queue_depth <= 4096:
        raise ValueError(f"queue_depth={queue_depth!r}: give 1 to 4096; fix: queue_depth=128, "
                         f"the default")
    if not count(intra_op_parallelism) or not 1 <= intra_op_parallelism <= 256:
        raise ValueError(f"intra_op_parallelism={intra_op_parallelism!r}: give 1 to 256 threads; "
                         f"fix: intra_op_parallelism=1, the default")


def _path_of(filename):
    """A path, or an open file descriptor's file by the path it was opened at: strata's engine
    opens its own O_DIRECT descriptor of the file."""
    if isinstance(filename, (str, os.PathLike)):
        return os.fspath(filename)
    if isinstance(filename, int) and not isinstance(filename, bool):
        try:
            path = os.readlink(f"/proc/self/fd/{filename}")
        except OSError as error:
            raise ValueError(f"file descriptor {filename} is not open in this process; fix: "
                             f"pass an open descriptor or the file's path") from error
        if not os.path.exists(path):
            raise ValueError(f"file descriptor {filename} is of {path}, which is no longer "
                             f"there (deleted, or not a file); fix: pass the file's path")
        return path
    raise ValueError(f"filename {filename!r}: give a path or an open file descriptor")


def _same_as_file(buffer, path, offset):
    nbytes = buffer.numel() * buffer.element_size()
    with open(path, "rb") as file:
        file.seek(offset)
        on_disk = file.read(nbytes)
    return bytes(buffer.view(torch.uint8).numpy()) == on_disk if nbytes else True
