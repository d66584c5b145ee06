"""What the native calls may be handed: contiguous CPU tensors (of fp32, bf16 or fp16 for the
optimizers), and hyperparameters in range.

Each check names the argument and the fix, as a ValueError, before any address reaches C++: a
CUDA tensor handed to a CPU op is refused here, never read as host memory.
"""

import torch

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def dtype_name(tensor, what):
    """The dtype's name as the native module takes it; refuses any other dtype."""
    name = _DTYPES.get(tensor.dtype)
    if name is None:
        raise ValueError(
            f"{what} is {tensor.dtype}: strata's CPU ops take float32, bfloat16 or float16; "
            f"fix: convert it with .to(torch.float32)")
    return name


def check_host_memory(tensor, what):
    """Refuses a tensor whose memory C++ cannot read in place (any dtype), naming `what`."""
    if tensor.device.type != "cpu":
        raise ValueError(
            f"{what} is on {tensor.device}, but strata's CPU ops read host memory; fix: keep "
            f"it on the CPU, or move it with .cpu() first")
    if not tensor.is_contiguous():
        raise ValueError(
            f"{what} is not contiguous; fix: make it so with .contiguous() (its elements are "
            f"read and written in order, in place)")


def check_cpu(tensor, what, numel=None):
    """Refuses a tensor the native step cannot read in place, naming `what` and the fix."""
    check_host_memory(tensor, what)
    if numel is not None and tensor.numel() != numel:
        raise ValueError(
            f"{what} has {tensor.numel()} elements where its parameter has {numel}; fix: "
            f"give it the parameter's shape")
    dtype_name(tensor, what)


def check_hyperparameters(group, keys):
    """Refuses, before any step, a hyperparameter of `group` out of range, naming the keyword:
    lr, eps and weight_decay finite and not negative, each beta in [0, 1)."""
    for key in keys:
        value = group[key]
        if key == "betas":
            if len(value) != 2 or not all(0.0 <= float(b) < 1.0 for b in value):
                raise ValueError(f"betas={tuple(value)!r}: give two numbers in [0, 1); fix: "
                                 f"betas=(0.9, 0.999), the default")
        elif not (float(value) >= 0.0 and float(value) != float("inf")):
            raise ValueError(f"{key}={value!r}: it is a finite number, not negative; fix: give "
                             f"one (a scheduler setting it may have gone wrong)")


def address(tensor):
    """The first element's address (0 for no tensor)."""
    return 0 if tensor is None else tensor.data_ptr()
