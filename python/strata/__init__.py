"""strata for PyTorch users: the engine's CPU optimizers (strata.optim) and DeepNVMe's aio handle
on its io_uring engine (strata.aio).

Built by the project's CMake into build/<preset>/python: `PYTHONPATH=build/release/python
python3 -c "import strata"`. Tensors pass without a copy, as their address and dtype; no libtorch
is linked.
"""

from strata import aio, optim

__all__ = ["aio", "optim"]
