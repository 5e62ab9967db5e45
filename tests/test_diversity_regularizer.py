"""DiversityRegularizer in real Trainer runs (automatic and manual optimisation, resume, a forgotten call) and on 2
processes, where the loss and the gradient must be those of 1 process fed the same samples."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import nn

from lightning_spectral.callbacks import DiversityRegularizer, diversity_term
from lightning_spectral.functional import RunningCovariance, diversity_loss
from lightning_spectral.kernels import GaussianRFF
from tests.ddp import run_ddp


class Collapsing(L.LightningModule):
    """A generator whose task loss pulls every sample to one point; ``regularize`` adds the diversity term."""

    def __init__(self, regularize: bool = True, manual: bool = False) -> None:
        super().__init__()
        self.generator = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.critic = nn.Linear(2, 1)
        self.regularize, self.automatic_optimization = regularize, not manual

    def training_step(self, batch, batch_idx):
        fake = self.generator(batch[0])
        loss = fake.square().sum(1).mean()  # every sample to 0: a collapse
        if self.regularize:
            loss = loss + diversity_term(self, fake)
        if self.automatic_optimization:
            return loss
        generator_opt, critic_opt = self.optimizers()
        generator_opt.zero_grad()
        self.manual_backward(loss)
        generator_opt.step()
        critic_opt.zero_grad()
        self.manual_backward(self.critic(fake.detach()).mean())
        critic_opt.step()

    def configure_optimizers(self):
        generator = torch.optim.Adam(self.generator.parameters(), lr=1e-2)
        return generator if self.automatic_optimization else [generator, torch.optim.Adam(self.critic.parameters())]


def noise(n: int = 320, seed: int = 0) -> torch.utils.data.DataLoader:
    data = torch.utils.data.TensorDataset(torch.randn(n, 4, generator=torch.Generator().manual_seed(seed)))
    return torch.utils.data.DataLoader(data, batch_size=32)


def trainer(tmp_path, *callbacks, epochs: int = 3) -> L.Trainer:
    return L.Trainer(max_epochs=epochs, callbacks=list(callbacks), default_root_dir=tmp_path, logger=False,
                     enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


def spread(module: Collapsing) -> float:
    with torch.no_grad():
        return float(module.generator(torch.randn(500, 4, generator=torch.Generator().manual_seed(9))).std(0).mean())


@pytest.mark.parametrize("manual", [False, True])
def test_it_keeps_a_collapsing_generator_spread_in_both_optimisation_modes(tmp_path, manual):
    torch.manual_seed(0)
    plain = Collapsing(regularize=False, manual=manual)
    trainer(tmp_path).fit(plain, noise())
    torch.manual_seed(0)
    regularized, regularizer = Collapsing(manual=manual), DiversityRegularizer(weight=0.5, sigma=0.5, n_frequencies=64)
    run = trainer(tmp_path, regularizer)
    run.fit(regularized, noise())
    assert spread(regularized) > 2.5 * spread(plain)  # measured 0.156 against 0.042 (both modes)
    assert {"diversity/loss_step", "diversity/loss_epoch", "diversity/rke_epoch"} <= set(run.logged_metrics)
    assert regularizer.running.weight > 30  # about the last 100 batches of 32: decay 0.99


def test_a_fit_that_never_calls_it_is_told_how(tmp_path):
    with pytest.raises(RuntimeError, match="diversity_term"):
        trainer(tmp_path, DiversityRegularizer(sigma=1.0, n_frequencies=16), epochs=1).fit(
            Collapsing(regularize=False), noise(64))
    with pytest.raises(RuntimeError, match="DiversityRegularizer"):
        trainer(tmp_path, epochs=1).fit(Collapsing(), noise(64))  # the call, but no callback
    with pytest.raises(ValueError, match="reference"):
        DiversityRegularizer()  # sigma="auto" without real samples to fit it to


def test_a_resumed_run_continues_from_the_saved_covariance(tmp_path):
    reference = torch.randn(200, 2, generator=torch.Generator().manual_seed(5))
    first = DiversityRegularizer(reference=reference, n_frequencies=32)
    run = trainer(tmp_path, first, epochs=1)
    run.fit(Collapsing(), noise(96))
    run.save_checkpoint(tmp_path / "one.ckpt")
    second = DiversityRegularizer(reference=reference, n_frequencies=32)
    resumed = trainer(tmp_path, second, epochs=1)
    resumed.fit(Collapsing(), noise(96), ckpt_path=tmp_path / "one.ckpt")  # max_epochs reached: restores only
    assert second.rff.sigma == first.rff.sigma and second.running.weight == first.running.weight
    torch.testing.assert_close(second.running.covariance(), first.running.covariance())
    other = DiversityRegularizer(reference=reference, n_frequencies=16)
    with pytest.raises(ValueError, match="width"):
        other.load_state_dict(first.state_dict())
    assert other.running.weight == 0.0 and other.rff.sigma is None


def _two_ranks(rank: int, world_size: int, rows: torch.Tensor, earlier: torch.Tensor):
    rff = GaussianRFF(3, 24, sigma=1.0, seed=0).double()
    running = RunningCovariance(48, decay=0.5)
    running.update(rff(earlier[rank::world_size]))  # every rank's earlier rows, summed across ranks
    mine = rows[rank::world_size].clone().requires_grad_(True)
    loss = diversity_loss(rff(mine), running)
    (grad,) = torch.autograd.grad(loss, mine)
    regularizer = DiversityRegularizer(weight=2.0, sigma=1.0, n_frequencies=24)
    fed = rows[rank::world_size].float().clone().requires_grad_(True)
    term = regularizer(fed)
    (term_grad,) = torch.autograd.grad(term, fed)
    return float(loss.detach()), grad, float(term.detach()), term_grad, running.weight


def test_two_processes_give_the_loss_and_gradient_of_one(tmp_path):
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(11, 3, generator=g, dtype=torch.float64)
    earlier = torch.randn(9, 3, generator=g, dtype=torch.float64)
    one = _two_ranks(0, 1, rows, earlier)
    results = run_ddp(_two_ranks, rows, earlier, tmp_path=tmp_path)
    assert all(result[0] == "ok" for result in results), results
    for rank, (_, (loss, grad, term, term_grad, weight)) in enumerate(results):
        assert loss == pytest.approx(one[0], rel=1e-12) and weight == one[4]
        torch.testing.assert_close(grad, one[1][rank::2], rtol=1e-10, atol=1e-14)
        assert term == pytest.approx(one[2], rel=1e-5)
        # DDP averages the ranks' gradients: each rank's is twice its share of one process's
        torch.testing.assert_close(term_grad, 2 * one[3][rank::2], rtol=1e-4, atol=1e-7)


def test_mixed_precision_leaves_the_loss_and_the_covariance_at_float32():
    """Under bfloat16 autocast (a ``bf16-mixed`` step) the features, the loss and the covariance's update run at
    float32: the same numbers as without it."""
    samples = torch.rand(32, 6, generator=torch.Generator().manual_seed(0))
    plain, mixed = (DiversityRegularizer(sigma=0.5, n_frequencies=64) for _ in range(2))
    for _ in range(2):
        want = plain(samples)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = mixed(samples)
    assert got.dtype == torch.float64 and float(got) == pytest.approx(float(want), rel=1e-6)
    torch.testing.assert_close(mixed.running.covariance(), plain.running.covariance(), rtol=1e-6, atol=1e-9)
