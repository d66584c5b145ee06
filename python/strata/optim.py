"""DeepSpeed's CPU optimizers on strata's cpu_adam: CPUAdam, CPUAdagrad and CPULion.

torch.optim.Optimizer subclasses with DeepSpeed's signatures (DeepSpeedCPUAdam, DeepSpeedCPUAdagrad,
DeepSpeedCPULion), stepping every parameter in place through the C++ kernels (AVX-512 or AVX2,
chosen at run time), with the GIL released.

- Parameters and gradients in float32, bfloat16 or float16. A 16-bit parameter steps from an fp32
  master kept in its state ("master") and gets the new value rounded to nearest even.
- Moments in float32 (fp32_optimizer_states=True), or in bfloat16 for a bfloat16 parameter.
- `threads` workers (0: every core); any count gives the same bits.
- The state uses torch's keys ("step", "exp_avg", "exp_avg_sq"; Adagrad's "sum"), so a state_dict
  moves between these and torch.optim.AdamW / Adagrad both ways.
- states="nvme", nvme_path=DIR: the fp32 masters and moments live in the engine's checksummed swap
  file under DIR instead of CPU memory, streamed through a few buffers of sub_group_size elements
  at each step (docs/python.md).
"""

import itertools
import os

import torch

from strata import _native
from strata._tensors import address, check_cpu, check_hyperparameters, dtype_name

__all__ = ["CPUAdam", "CPUAdagrad", "CPULion"]


_SWAP_NAMES = itertools.count()


def _check_threads(threads):
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ValueError(f"threads={threads!r}: give a count of workers, or 0 for every core")


class _CPUOptimizer(torch.optim.Optimizer):
    """What the three share: the state, its checks and its loading. A subclass names its moments
    (torch's state keys) and steps one parameter in _step_one."""

    _moments = ()
    _hyperparameters = ()  # the group's keys check_hyperparameters checks before a step
    _rule = ""  # the engine's name of the rule, for states on NVMe
    _engine_moments = {}  # torch's key -> the engine's state (exp_avg or exp_avg_sq)

    def __init__(self, params, defaults, fp32_optimizer_states, threads, nvme):
        _check_threads(threads)
        super().__init__(params, defaults)
        self.fp32_optimizer_states = fp32_optimizer_states
        self.threads = threads
        if nvme["states"] not in ("cpu", "nvme"):
            raise ValueError(f"states={nvme['states']!r}: give \"cpu\" (the default) or \"nvme\"")
        placement = nvme.pop("states")
        self._nvme = _NvmeStates(self, **nvme) if placement == "nvme" else None

    def state_dict(self):
        """torch's state_dict; with the states on NVMe, they are read into it (its tensors take
        the states' memory, 12 bytes a parameter for Adam, while it is kept)."""
        if self._nvme is not None:
            return self._nvme.state_dict(self)
        return super().state_dict()

    def _states_dtype(self, p):
        if self.fp32_optimizer_states or p.dtype == torch.float32:
            return torch.float32
        if p.dtype == torch.bfloat16:
            return torch.bfloat16
        raise ValueError(
            f"a {p.dtype} parameter with fp32_optimizer_states=False: strata keeps moments in "
            f"float32 or bfloat16; fix: pass fp32_optimizer_states=True")

    def _new_state(self, p):
        state = {"step": torch.tensor(0.0)}
        for key in self._moments:
            state[key] = torch.zeros(p.shape, dtype=self._states_dtype(p))
        if p.dtype != torch.float32:
            state["master"] = p.detach().to(torch.float32, copy=True).contiguous()
        return state

    def _arrays(self, p, state):
        """The native step's arrays: the master (or the fp32 parameter), the gradient, the
        16-bit copy (the parameter itself) and the moments' dtype."""
        check_cpu(p, "a parameter")
        if p.grad.is_sparse:
            raise ValueError("a sparse gradient: strata's CPU optimizers step dense ones; fix: "
                             "use torch.optim.SparseAdam for sparse embeddings")
        check_cpu(p.grad, "a parameter's gradient", p.numel())
        for key in self._moments:
            check_cpu(state[key], f"the state's {key!r}", p.numel())
        master = state.get("master")
        if master is not None:
            check_cpu(master, "the state's 'master'", p.numel())
        params = p if master is None else master
        moments = state[self._moments[0]]
        return dict(numel=p.numel(), params=address(params),
                    params_dtype=dtype_name(params, "the stepped parameter"),
                    grads=address(p.grad), grads_dtype=dtype_name(p.grad, "a gradient"),
                    states_dtype=dtype_name(moments, "the moments"),
                    copy=0 if master is None else address(p),
                    copy_dtype="" if master is None else dtype_name(p, "a parameter"))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._nvme is not None:
            self._nvme.step(self)
            return loss
        for group in self.param_groups:
            check_hyperparameters(group, self._hyperparameters)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state.update(self._new_state(p))
                arrays = self._arrays(p, state)  # its checks before the step counts
                step = int(state["step"].item()) + 1
                self._step_one(group, arrays, state, step)
                state["step"] += 1
        return loss

    def load_state_dict(self, state_dict):
        """Loads a state_dict of this class, of torch's optimizer of the same rule, or of
        DeepSpeed's (an int step): the moments keep this optimizer's dtypes, and a 16-bit
        parameter's master is the saved one, or the parameter widened when there is none."""
        super().load_state_dict(state_dict)  # the groups; it casts states to the params' dtypes
        for group in self.param_groups:  # torch's groups lack DeepSpeed's keys
            for key, value in self.defaults.items():
                group.setdefault(key, value)
        if self._nvme is not None:
            self.state.clear()  # they go to the swap file instead
            self._nvme.load(self, state_dict)
            return
        params = [p for group in self.param_groups for p in group["params"]]
        for index, saved in state_dict["state"].items():
            p = params[index]
            self.state[p] = self._state_from(p, saved)

    def _state_from(self, p, saved):
        state = {"step": torch.tensor(float(saved["step"]))}
        for key in self._moments:
            if key not in saved:
                raise ValueError(f"the loaded state has no {key!r} (it has {sorted(saved)}); fix: "
                                 f"load a state_dict of {type(self).__name__} or of torch's "
                                 f"optimizer of the same rule")
            state[key] = saved[key].detach().to("cpu", self._states_dtype(p), copy=True)
        if p.dtype != torch.float32:
            master = saved.get("master", p)
            state["master"] = master.detach().to("cpu", torch.float32, copy=True).contiguous()
        return state


class CPUAdam(_CPUOptimizer):
    """Adam, or AdamW with adamw_mode=True (decoupled weight decay), DeepSpeedCPUAdam's
    signature. amsgrad is refused, as DeepSpeed has none."""

    _moments = ("exp_avg", "exp_avg_sq")
    _hyperparameters = ("lr", "betas", "eps", "weight_decay")
    _engine_moments = {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}

    _rule = "adam"

    def __init__(self, model_params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0, amsgrad=False, adamw_mode=True, fp32_optimizer_states=True,
                 threads=0, states="cpu", nvme_path=None, sub_group_size=100_000_000,
                 buffer_count=4, pin_memory=False):
        if amsgrad:
            raise ValueError("amsgrad=True: CPUAdam, as DeepSpeedCPUAdam, has no AMSGrad; fix: "
                             "pass amsgrad=False, or use torch.optim.AdamW(amsgrad=True)")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction, amsgrad=False)
        self.adamw_mode = adamw_mode
        super().__init__(model_params, defaults, fp32_optimizer_states, threads,
                         dict(states=states, nvme_path=nvme_path, sub_group_size=sub_group_size,
                              buffer_count=buffer_count, pin_memory=pin_memory))

    def _step_one(self, group, arrays, state, step):
        beta1, beta2 = group["betas"]
        _native.adam_step(**arrays, exp_avg=address(state["exp_avg"]),
                          exp_avg_sq=address(state["exp_avg_sq"]), lr=group["lr"], beta1=beta1,
                          beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                          bias_correction=group["bias_correction"], adamw_mode=self.adamw_mode,
                          step=step, threads=self.threads)


class CPUAdagrad(_CPUOptimizer):
    """Adagrad (torch.optim.Adagrad without lr decay or an initial accumulator),
    DeepSpeedCPUAdagrad's signature; the sum of squares is torch's "sum"."""

    _moments = ("sum",)
    _hyperparameters = ("lr", "eps", "weight_decay")
    _engine_moments = {"sum": "exp_avg_sq"}

    _rule = "adagrad"

    def __init__(self, model_params, lr=1e-2, eps=1e-10, weight_decay=0, amsgrad=False,
                 fp32_optimizer_states=True, threads=0, states="cpu", nvme_path=None,
                 sub_group_size=100_000_000, buffer_count=4, pin_memory=False):
        if amsgrad:
            raise ValueError("amsgrad=True: CPUAdagrad, as DeepSpeedCPUAdagrad, has no AMSGrad; "
                             "fix: pass amsgrad=False")
        defaults = dict(lr=lr, eps=eps, weight_decay=weight_decay, amsgrad=False)
        super().__init__(model_params, defaults, fp32_optimizer_states, threads,
                         dict(states=states, nvme_path=nvme_path, sub_group_size=sub_group_size,
                              buffer_count=buffer_count, pin_memory=pin_memory))

    def _step_one(self, group, arrays, state, step):
        _native.adagrad_step(**arrays, sum=address(state["sum"]), lr=group["lr"],
                             eps=group["eps"], weight_decay=group["weight_decay"], step=step,
                             threads=self.threads)


class CPULion(_CPUOptimizer):
    """Lion (Chen et al. 2023), DeepSpeedCPULion's signature; the momentum is "exp_avg"."""

    _moments = ("exp_avg",)
    _hyperparameters = ("lr", "betas", "weight_decay")
    _engine_moments = {"exp_avg": "exp_avg"}

    _rule = "lion"

    def __init__(self, model_params, lr=1e-3, betas=(0.9, 0.999), weight_decay=0,
                 fp32_optimizer_states=True, threads=0, states="cpu", nvme_path=None,
                 sub_group_size=100_000_000, buffer_count=4, pin_memory=False):
        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay)
        super().__init__(model_params, defaults, fp32_optimizer_states, threads,
                         dict(states=states, nvme_path=nvme_path, sub_group_size=sub_group_size,
                              buffer_count=buffer_count, pin_memory=pin_memory))

    def _step_one(self, group, arrays, state, step):
        beta1, beta2 = group["betas"]
        _native.lion_step(**arrays, exp_avg=address(state["exp_avg"]), lr=group["lr"],
                          beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], step=step,
                          threads=self.threads)


def _fp32(saved, key, optimizer, numel, default=None):
    """A saved state as a contiguous fp32 CPU tensor of its parameter's `numel` elements."""
    value = saved.get(key, default)
    if value is None:
        raise ValueError(f"the loaded state has no {key!r} (it has {sorted(saved)}); fix: load a "
                         f"state_dict of {type(optimizer).__name__} or of torch's optimizer of "
                         f"the same rule")
    if value.numel() != numel:
        raise ValueError(f"the loaded {key!r} has {value.numel()} elements where its parameter "
                         f"has {numel}; fix: load a state_dict of the same model")
    return value.detach().to("cpu", torch.float32).contiguous()


class _NvmeStates:
    """An optimizer's states in the engine's swap file (strata._native.NvmeOptimizer): the
    parameters of its one group laid end to end as one partition, stepped sub-group by
    sub-group. Made at the first step, from the parameters' values then, as torch's optimizers
    read theirs; a failed transfer leaves it refusing every later step. It holds no reference
    to its optimizer, so the swap directory goes when the optimizer does."""

    def __init__(self, optimizer, nvme_path, sub_group_size, buffer_count, pin_memory):
        if nvme_path is None:
            raise ValueError("states=\"nvme\" without nvme_path; fix: pass nvme_path=DIR, a "
                             "directory on the disk that is to hold the states")
        if len(optimizer.param_groups) != 1:
            raise ValueError(f"states=\"nvme\" steps one partition, and there are "
                             f"{len(optimizer.param_groups)} parameter groups; fix: give one "
                             f"group, or states=\"cpu\"")
        if not optimizer.fp32_optimizer_states:
            raise ValueError("states=\"nvme\" keeps fp32 masters and moments; fix: leave "
                             "fp32_optimizer_states=True")
        for key, value in (("sub_group_size", sub_group_size), ("buffer_count", buffer_count)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{key}={value!r}: give a positive count; fix: leave the "
                                 f"default")
        self._settings = dict(nvme_path=os.fspath(nvme_path), sub_group_size=sub_group_size,
                              buffer_count=buffer_count, pin_memory=pin_memory,
                              job=f"python-{os.getpid()}-{next(_SWAP_NAMES)}")
        self._native = None
        self._step = 0
        self._made_for = None  # what the states were made for: see _check_unchanged

    def step(self, optimizer):
        group = optimizer.param_groups[0]
        params = group["params"]
        check_hyperparameters(group, optimizer._hyperparameters)
        for p in params:
            check_cpu(p, "a parameter")
            if p.grad is None:
                raise ValueError("a parameter has no gradient, and states=\"nvme\" steps every "
                                 "parameter of its partition; fix: leave frozen parameters out "
                                 "of the optimizer, or give them zero gradients")
            check_cpu(p.grad, "a parameter's gradient", p.numel())
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1:
            raise ValueError(f"states=\"nvme\" steps parameters of one dtype, and these are "
                             f"{sorted(str(d) for d in dtypes)}; fix: one optimizer per dtype")
        if self._native is None:
            self._native = self._make(optimizer, group, params)
            self._native.fill(params=[p.data_ptr() for p in params])
        self._check_unchanged(optimizer, group, params)
        self._step += 1
        self._native.step(step=self._step, lr=group["lr"],
                          betas=tuple(group.get("betas", (0.9, 0.999))),
                          params=[p.data_ptr() for p in params],
                          grads=[p.grad.data_ptr() for p in params])

    @staticmethod
    def _made_of(optimizer, group, params):
        """What the native states keep from their making: the parameters' sizes and dtype, and
        the hyperparameters a step does not pass (lr and betas it does)."""
        return dict(numels=[p.numel() for p in params], dtype=params[0].dtype,
                    eps=group.get("eps"), weight_decay=group["weight_decay"],
                    bias_correction=group.get("bias_correction"),
                    adamw_mode=getattr(optimizer, "adamw_mode", True))

    def _check_unchanged(self, optimizer, group, params):
        now = self._made_of(optimizer, group, params)
        for key, was in self._made_for.items():
            if now[key] != was:
                shown = "the parameters' sizes" if key == "numels" else key
                raise ValueError(f"{shown} changed from {was} to {now[key]} since the states on "
                                 f"NVMe were made; fix: keep them, or make a new optimizer")

    def _make(self, optimizer, group, params):
        self._made_for = self._made_of(optimizer, group, params)
        native = _native.NvmeOptimizer(
            type=optimizer._rule, lr=group["lr"],
            betas=tuple(group.get("betas", (0.9, 0.999))), eps=group.get("eps", 1e-8),
            weight_decay=group["weight_decay"],
            bias_correction=group.get("bias_correction", True),
            adamw_mode=getattr(optimizer, "adamw_mode", True),
            numels=[p.numel() for p in params], dtype=dtype_name(params[0], "a parameter"),
            **self._settings)
        return native

    def state_dict(self, optimizer):
        packed = torch.optim.Optimizer.state_dict(optimizer)  # the groups, no state
        if self._native is None:
            return packed
        params = optimizer.param_groups[0]["params"]
        moments = {key: [torch.empty(p.shape) for p in params] for key in optimizer._moments}
        masters = [None if p.dtype == torch.float32 else torch.empty(p.shape) for p in params]
        self._native.read_states(masters=[0 if m is None else m.data_ptr() for m in masters],
                                 **self._engine_addresses(optimizer, moments))
        for index in range(len(params)):
            entry = {"step": torch.tensor(float(self._step))}
            entry.update({key: moments[key][index] for key in optimizer._moments})
            if masters[index] is not None:
                entry["master"] = masters[index]
            packed["state"][index] = entry
        return packed

    def load(self, optimizer, state_dict):
        """The saved states (this class's or torch's, fp32 or not) written to the swap file."""
        group = optimizer.param_groups[0]
        params = group["params"]
        saved = state_dict["state"]
        if not saved:  # a fresh optimizer's: start again, as torch's optimizers do
            self._native, self._step = None, 0
            return
        missing = [i for i in range(len(params)) if i not in saved]
        if missing:
            raise ValueError(f"the loaded state has none for parameters {missing}, and states="
                             f"\"nvme\" steps them all; fix: load a state_dict of the same model")
        fp32 = [{key: _fp32(saved[i], key, optimizer, p.numel()) for key in optimizer._moments}
                for i, p in enumerate(params)]
        masters = [_fp32(saved[i], "master", optimizer, p.numel(), default=p)
                   for i, p in enumerate(params)]
        moments = {key: [entry[key] for entry in fp32] for key in optimizer._moments}
        if self._native is None:
            self._native = self._make(optimizer, group, params)
        self._check_unchanged(optimizer, group, params)
        self._native.write_states(masters=[m.data_ptr() for m in masters],
                                  **self._engine_addresses(optimizer, moments))
        self._step = int(float(saved[0]["step"]))

    @staticmethod
    def _engine_addresses(optimizer, moments):
        addresses = {"exp_avg": [], "exp_avg_sq": []}
        for key, engine_name in optimizer._engine_moments.items():
            addresses[engine_name] = [tensor.data_ptr() for tensor in moments[key]]
        return addresses

    @property
    def nvme_bytes(self):
        """Bytes of the swap file the states take (0 before the first step)."""
        return 0 if self._native is None else self._native.nvme_bytes

    @property
    def buffer_bytes(self):
        """CPU memory the states' swap buffers take (0 before the first step)."""
        return 0 if self._native is None else self._native.buffer_bytes
