"""strata.optim with states="nvme": the same bits as the states in CPU memory for every rule and
parameter type, sub-groups crossing tensors; the states on disk and only the swap buffers in
memory, whatever the model's size; a disk that returns other bytes than were written named, and
every later step refused; state_dicts that resume to the bit and move to and from torch; the
refusals."""

import gc
import os

import pytest
import torch

from strata.optim import CPUAdagrad, CPUAdam, CPULion

SHAPES = [(1000,), (70, 1000), (5,)]  # sub-groups of 4,096 cut across all three


def params(dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator).to(dtype))
            for shape in SHAPES]


def train(optimizer, tensors, steps=20, seed=1):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in tensors:
            p.grad = torch.randn(p.shape, generator=generator).to(p.dtype)
        optimizer.step()


@pytest.mark.parametrize("rule,kwargs", [(CPUAdam, dict(weight_decay=0.01)),
                                         (CPUAdam, dict(adamw_mode=False, weight_decay=0.01)),
                                         (CPUAdagrad, dict(weight_decay=0.01)),
                                         (CPULion, dict(weight_decay=0.1))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_states_on_nvme_step_to_the_bits_of_states_in_memory(tmp_path, rule, kwargs, dtype):
    on_disk, in_memory = params(dtype), params(dtype)
    train(rule(on_disk, states="nvme", nvme_path=tmp_path, sub_group_size=4096, **kwargs),
          on_disk)
    train(rule(in_memory, **kwargs), in_memory)
    for a, b in zip(on_disk, in_memory):
        assert torch.equal(a, b)


def test_the_states_are_on_disk_and_only_buffers_in_memory(tmp_path):
    small, large = params(), [torch.nn.Parameter(torch.zeros(2_000_000))]
    footprints = []
    for tensors in (small, large):
        optimizer = CPUAdam(tensors, states="nvme", nvme_path=tmp_path, sub_group_size=65536)
        train(optimizer, tensors, steps=2)
        numel = sum(p.numel() for p in tensors)
        assert optimizer._nvme.nvme_bytes >= 12 * numel  # master, exp_avg, exp_avg_sq
        footprints.append(optimizer._nvme.buffer_bytes)
        assert any(name.startswith("strata-python-") for name in os.listdir(tmp_path))
        del optimizer
        gc.collect()
    assert footprints[0] == footprints[1] <= 4 * 12 * 65536 + 4 * 3 * 4096
    assert not any(name.startswith("strata-python-") for name in os.listdir(tmp_path))


def test_a_disk_returning_other_bytes_is_named_and_every_later_step_refused(tmp_path):
    tensors = params()
    optimizer = CPUAdam(tensors, states="nvme", nvme_path=tmp_path, sub_group_size=4096)
    train(optimizer, tensors, steps=2)
    (swap,) = tmp_path.glob("strata-python-*/rank0/swap.bin")
    with open(swap, "r+b") as file:  # a sector of the first sub-group's masters goes bad
        file.seek(8)
        file.write(b"\x5a" * 16)
    with pytest.raises(OSError) as failed:
        train(optimizer, tensors, steps=1)
    assert str(swap) in str(failed.value) and "CRC32C" in str(failed.value)
    assert "training cannot continue from this state" in str(failed.value)
    with pytest.raises(OSError, match="swap.bin"):
        train(optimizer, tensors, steps=1)


def test_refusals_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match="without nvme_path; fix"):
        CPUAdam(params(), states="nvme")
    with pytest.raises(ValueError, match="states='disk'"):
        CPUAdam(params(), states="disk")
    groups = [{"params": params()[:1]}, {"params": params()[1:]}]
    with pytest.raises(ValueError, match="2 parameter groups; fix"):
        CPUAdam(groups, states="nvme", nvme_path=tmp_path)
    tensors = params()
    optimizer = CPUAdam(tensors, states="nvme", nvme_path=tmp_path)
    with pytest.raises(ValueError, match="has no gradient.*fix"):
        optimizer.step()
    mixed = params()[:1] + params(torch.bfloat16)[1:]
    for p in mixed:
        p.grad = torch.zeros_like(p)
    with pytest.raises(ValueError, match="one dtype.*fix"):
        CPUAdam(mixed, states="nvme", nvme_path=tmp_path).step()
    assert optimizer.state_dict()["state"] == {}  # nothing stepped yet


def test_a_state_dict_of_nvme_states_resumes_to_the_bit(tmp_path):
    for dtype in (torch.float32, torch.bfloat16):
        first, resumed, straight = params(dtype), None, params(dtype)
        optimizer = CPUAdam(first, states="nvme", nvme_path=tmp_path, sub_group_size=4096)
        train(optimizer, first, steps=10)
        saved = optimizer.state_dict()
        assert sorted(saved["state"][1]) == (["exp_avg", "exp_avg_sq", "step"]
                                            if dtype == torch.float32
                                            else ["exp_avg", "exp_avg_sq", "master", "step"])
        resumed = [torch.nn.Parameter(p.detach().clone()) for p in first]
        again = CPUAdam(resumed, states="nvme", nvme_path=tmp_path, sub_group_size=4096)
        again.load_state_dict(saved)
        train(again, resumed, steps=10, seed=2)
        in_memory = CPUAdam(straight)
        train(in_memory, straight, steps=10)
        train(in_memory, straight, steps=10, seed=2)
        for a, b in zip(resumed, straight):
            assert torch.equal(a, b)


def test_a_state_dict_moves_between_nvme_states_and_torch(tmp_path):
    ours, theirs = params(), params()
    optimizer = CPUAdam(ours, lr=1e-2, weight_decay=0.01, states="nvme", nvme_path=tmp_path)
    train(optimizer, ours, steps=10)
    with torch.no_grad():
        for a, b in zip(theirs, ours):
            a.copy_(b)
    adamw = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.01)
    adamw.load_state_dict(optimizer.state_dict())
    train(adamw, theirs, steps=5, seed=3)
    train(optimizer, ours, steps=5, seed=3)
    for a, b in zip(ours, theirs):
        assert (a - b).abs().max() <= 1e-6 * b.abs().max()
    back = CPUAdam(ours, lr=1e-2, weight_decay=0.01, states="nvme", nvme_path=tmp_path)
    back.load_state_dict(adamw.state_dict())
    train(back, ours, steps=5, seed=4)
    train(adamw, theirs, steps=5, seed=4)
    for a, b in zip(ours, theirs):
        assert (a - b).abs().max() <= 1e-6 * b.abs().max()


def test_what_the_states_were_made_for_may_not_change(tmp_path):
    tensors = params()
    optimizer = CPUAdam(tensors, states="nvme", nvme_path=tmp_path, eps=1e-8)
    train(optimizer, tensors, steps=1)
    optimizer.param_groups[0]["eps"] = 1e-6
    with pytest.raises(ValueError, match="eps changed from 1e-08 to 1e-06.*fix"):
        train(optimizer, tensors, steps=1)
    optimizer.param_groups[0]["eps"] = 1e-8
    optimizer.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError, match="lr=-1.0.*fix"):
        train(optimizer, tensors, steps=1)
    optimizer.param_groups[0]["lr"] = 1e-3
    train(optimizer, tensors, steps=1)  # the refusals left the states usable
    saved = optimizer.state_dict()
    saved["state"][1]["exp_avg"] = torch.zeros(3)
    with pytest.raises(ValueError, match="'exp_avg' has 3 elements where its parameter has "
                                         "70000; fix"):
        optimizer.load_state_dict(saved)
