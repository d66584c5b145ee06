"""strata.optim against torch's optimizers and against itself: 20 steps within stated tolerances of
torch.optim.AdamW, Adam, Adagrad and a Lion written in torch; 16-bit parameters stepping from
fp32 masters to the bit; any thread count to the bit; state_dicts moving to and from torch; the
refusals, each naming its fix; two Python threads stepping at once."""

import threading

import pytest
import torch

from strata.optim import CPUAdagrad, CPUAdam, CPULion

STEPS = 20
# Of the largest parameter: fp32 roundings of 20 steps taken in another order than torch's
# (a fused multiply-add where torch rounds twice, the bias corrections folded differently).
TOLERANCE = 1e-6


def gradients(shape, seed):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for _ in range(STEPS)]


def train(optimizer, params, grads):
    for grad in grads:
        for p in params:
            p.grad = grad.to(p.dtype)
        optimizer.step()


def pair(shape=(1000,), dtype=torch.float32, seed=0):
    start = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    return torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())


def lion_in_torch(params, lr, betas, weight_decay):
    """Lion as its paper and DeepSpeed write it, in torch: the reference for CPULion."""
    momenta = [torch.zeros_like(p) for p in params]

    def step():
        with torch.no_grad():
            for p, m in zip(params, momenta):
                c = betas[0] * m + (1 - betas[0]) * p.grad
                p.mul_(1 - lr * weight_decay).add_(torch.where(c.signbit(), 1.0, -1.0) * lr)
                m.mul_(betas[1]).add_(p.grad, alpha=1 - betas[1])
    return step


def assert_close(ours, theirs):
    scale = theirs.detach().abs().max().item()
    assert (ours.detach() - theirs.detach()).abs().max().item() <= TOLERANCE * scale


@pytest.mark.parametrize("adamw_mode,torch_class", [(True, torch.optim.AdamW),
                                                     (False, torch.optim.Adam)])
def test_adam_follows_torch_over_20_steps(adamw_mode, torch_class):
    ours, theirs = pair()
    grads = gradients(ours.shape, 1)
    train(CPUAdam([ours], lr=1e-2, weight_decay=0.01, adamw_mode=adamw_mode), [ours], grads)
    train(torch_class([theirs], lr=1e-2, weight_decay=0.01), [theirs], grads)
    assert_close(ours, theirs)


def test_adagrad_follows_torch_over_20_steps():
    ours, theirs = pair()
    grads = gradients(ours.shape, 2)
    train(CPUAdagrad([ours], lr=1e-2, weight_decay=0.01), [ours], grads)
    train(torch.optim.Adagrad([theirs], lr=1e-2, weight_decay=0.01), [theirs], grads)
    assert_close(ours, theirs)


def test_lion_follows_a_lion_in_torch_over_20_steps():
    ours, theirs = pair()
    step = lion_in_torch([theirs], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    optimizer = CPULion([ours], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    for grad in gradients(ours.shape, 3):
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        optimizer.step()
        step()
    assert_close(ours, theirs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_16_bit_parameter_steps_from_its_fp32_master(dtype):
    # Values and gradients exact in the 16-bit type: the master then takes the fp32 steps of an
    # fp32 parameter, bit for bit, and the parameter is the master rounded.
    start = torch.randn(3000, generator=torch.Generator().manual_seed(4)).to(dtype)
    half = torch.nn.Parameter(start.clone())
    full = torch.nn.Parameter(start.float())
    grads = [g.to(dtype).float() for g in gradients(half.shape, 5)]
    half_adam = CPUAdam([half], lr=1e-2, weight_decay=0.01)
    train(half_adam, [half], grads)
    train(CPUAdam([full], lr=1e-2, weight_decay=0.01), [full], grads)
    assert torch.equal(half_adam.state[half]["master"], full.detach())
    assert torch.equal(half.detach(), full.detach().to(dtype))


def test_bf16_moments_for_a_bf16_parameter():
    param = torch.nn.Parameter(torch.randn(500).bfloat16())
    optimizer = CPUAdam([param], fp32_optimizer_states=False)
    train(optimizer, [param], gradients(param.shape, 6))
    assert optimizer.state[param]["exp_avg"].dtype == torch.bfloat16
    assert optimizer.state[param]["master"].dtype == torch.float32


@pytest.mark.parametrize("optimizer_class", [CPUAdam, CPUAdagrad, CPULion])
def test_any_thread_count_gives_the_same_bits(optimizer_class):
    grads = gradients((300_000,), 7)  # several tiles of 65,536, so the workers share them
    results = []
    for threads in (1, 2, 3):
        param, _ = pair((300_000,), seed=8)
        train(optimizer_class([param], threads=threads), [param], grads)
        results.append(param.detach())
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])


def test_a_state_dict_moves_to_torch_and_back():
    ours, theirs = pair()
    grads = gradients(ours.shape, 9)
    first, second = grads[:10], grads[10:]
    strata_adam = CPUAdam([ours], lr=1e-2, weight_decay=0.01)
    train(strata_adam, [ours], first)
    # strata -> torch: AdamW takes the moments and the step and goes on.
    with torch.no_grad():
        theirs.copy_(ours)
    torch_adam = torch.optim.AdamW([theirs], lr=1e-2, weight_decay=0.01)
    torch_adam.load_state_dict(strata_adam.state_dict())
    assert sorted(strata_adam.state_dict()["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    train(torch_adam, [theirs], second)
    train(strata_adam, [ours], second)
    assert_close(ours, theirs)
    # torch -> strata: a fresh CPUAdam takes torch's state and follows it.
    again = torch.nn.Parameter(theirs.detach().clone())
    resumed = CPUAdam([again], lr=1e-2, weight_decay=0.01)
    resumed.load_state_dict(torch_adam.state_dict())
    more = gradients(ours.shape, 10)[:5]
    train(resumed, [again], more)
    train(torch_adam, [theirs], more)
    assert_close(again, theirs)
    assert int(resumed.state[again]["step"].item()) == STEPS + 5


def test_a_bf16_parameters_state_dict_keeps_its_fp32_master():
    param = torch.nn.Parameter(torch.randn(200).bfloat16())
    optimizer = CPUAdam([param])
    train(optimizer, [param], gradients(param.shape, 11))
    saved = optimizer.state_dict()
    copy = torch.nn.Parameter(param.detach().clone())
    loaded = CPUAdam([copy])
    loaded.load_state_dict(saved)
    state = loaded.state[copy]
    assert state["master"].dtype == torch.float32 and state["exp_avg"].dtype == torch.float32
    assert torch.equal(state["master"], optimizer.state[param]["master"])


class ReportsCuda(torch.Tensor):
    """A CPU tensor that reports a CUDA device, as a GPU tensor would where torch has none."""

    @property
    def device(self):
        return torch.device("cuda", 0)


def test_refusals_name_the_argument_and_the_fix():
    with pytest.raises(ValueError, match="amsgrad=True.*fix: pass amsgrad=False"):
        CPUAdam([torch.nn.Parameter(torch.zeros(4))], amsgrad=True)
    with pytest.raises(ValueError, match="threads=-1"):
        CPUAdam([torch.nn.Parameter(torch.zeros(4))], threads=-1)
    on_gpu = torch.nn.Parameter(torch.zeros(4).as_subclass(ReportsCuda))
    on_gpu.grad = torch.zeros(4)
    with pytest.raises(ValueError, match="a parameter is on cuda:0.*fix: keep it on the CPU"):
        CPUAdam([on_gpu]).step()
    param = torch.nn.Parameter(torch.zeros(4, 4))
    param.grad = torch.zeros(4, 4).t()
    with pytest.raises(ValueError, match="gradient is not contiguous; fix"):
        CPUAdam([param]).step()
    half = torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))
    half.grad = torch.zeros(4, dtype=torch.float16)
    with pytest.raises(ValueError, match="fp32_optimizer_states=False.*fix"):
        CPUAdam([half], fp32_optimizer_states=False).step()
    bad_lr = torch.nn.Parameter(torch.zeros(4))
    bad_lr.grad = torch.zeros(4)
    with pytest.raises(ValueError, match="lr.*fix"):
        CPUAdam([bad_lr], lr=-1.0).step()


def test_two_python_threads_step_at_the_same_time():
    grads = gradients((200_000,), 12)
    alone = []
    for seed in (13, 14):
        param, _ = pair((200_000,), seed=seed)
        train(CPUAdam([param]), [param], grads)
        alone.append(param.detach())
    together = [None, None]

    def run(index, seed):
        param, _ = pair((200_000,), seed=seed)
        train(CPUAdam([param]), [param], grads)
        together[index] = param.detach()

    workers = [threading.Thread(target=run, args=(i, seed)) for i, seed in enumerate((13, 14))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert torch.equal(together[0], alone[0]) and torch.equal(together[1], alone[1])


def test_a_fresh_torch_state_dict_loads_and_steps():
    # torch's groups carry no DeepSpeed keys (bias_correction): the defaults fill them.
    ours, theirs = pair()
    adamw = torch.optim.AdamW([theirs], lr=1e-2, weight_decay=0.01)
    train(adamw, [theirs], gradients(theirs.shape, 15)[:3])
    with torch.no_grad():
        ours.copy_(theirs)
    resumed = CPUAdam([ours], lr=1e-2, weight_decay=0.01)
    resumed.load_state_dict(adamw.state_dict())
    more = gradients(ours.shape, 16)[:3]
    train(resumed, [ours], more)
    train(adamw, [theirs], more)
    assert_close(ours, theirs)


def test_a_refused_step_changes_nothing():
    param = torch.nn.Parameter(torch.ones(8))
    param.grad = torch.ones(8)
    optimizer = CPUAdam([param], lr=1e-2)
    optimizer.step()
    optimizer.param_groups[0]["lr"] = float("nan")
    with pytest.raises(ValueError, match="lr=nan.*fix"):
        optimizer.step()
    assert int(optimizer.state[param]["step"].item()) == 1
    optimizer.param_groups[0]["lr"] = 1e-2
    optimizer.param_groups[0]["betas"] = (0.9, 1.5)
    with pytest.raises(ValueError, match="betas=.*fix"):
        optimizer.step()
