"""What the native steps may be handed: contiguous CPU tensors of fp32, bf16 or fp16.

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


def check_cpu(tensor, what, numel=None):
    """Refuses a tensor the native step cannot read in place, naming `what` and the fix."""
    if tensor.device.type != "cpu":
        raise ValueError(
            f"{what} is on {tensor.device}, but strata's CPU optimizers read host memory; "
            f"fix: keep the parameters on the CPU (offload the optimizer) or move them with "
            f".cpu() before the step")
    if not tensor.is_contiguous():
        raise ValueError(
            f"{what} is not contiguous; fix: make it so with .contiguous() (the step reads "
            f"its elements in order, in place)")
    if numel is not None and tensor.numel() != numel:
        raise ValueError(
            f"{what} has {tensor.numel()} elements where its parameter has {numel}; fix: "
            f"give it the parameter's shape")
    dtype_name(tensor, what)


def address(tensor):
    """The first element's address (0 for no tensor)."""
    return 0 if tensor is None else tensor.data_ptr()
