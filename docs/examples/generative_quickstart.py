"""GAN / VAE in five minutes: your LightningModule, one callback, the headline and the missing-modes gallery."""

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from lightning_spectral.callbacks import GeneratedSamples
from lightning_spectral.data import DigitsImages
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi


class DigitsGAN(L.LightningModule):
    """Any generative LightningModule: it needs a `sample` method (a validation loop is optional)."""

    def __init__(self, latent: int = 16) -> None:
        super().__init__()
        self.automatic_optimization = False  # a GAN: two optimisers, stepped by hand
        self.latent = latent
        self.generator = nn.Sequential(nn.Linear(latent, 256), nn.ReLU(), nn.Linear(256, 64), nn.Sigmoid())
        self.discriminator = nn.Sequential(nn.Linear(64, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1))

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """What GeneratedSamples calls: `n` images (n, C, H, W), floats in [0, 1] (or uint8), seeded by `generator`."""
        z = torch.randn(n, self.latent, generator=generator).to(self.device)
        return self.generator(z).reshape(n, 1, 8, 8)

    def training_step(self, batch, batch_idx):
        real = batch["image"].flatten(1)
        opt_g, opt_d = self.optimizers()
        fake = self.generator(torch.randn(len(real), self.latent, device=self.device))
        bce = nn.functional.binary_cross_entropy_with_logits
        d_real, d_fake = self.discriminator(real), self.discriminator(fake.detach())
        loss_d = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
        opt_d.zero_grad()
        self.manual_backward(loss_d)
        opt_d.step()
        d_gen = self.discriminator(fake)
        loss_g = bce(d_gen, torch.ones_like(d_gen))
        opt_g.zero_grad()
        self.manual_backward(loss_g)
        opt_g.step()

    def configure_optimizers(self):
        return [torch.optim.Adam(self.generator.parameters(), 1e-3, betas=(0.5, 0.999)),
                torch.optim.Adam(self.discriminator.parameters(), 1e-3, betas=(0.5, 0.999))]


sigma, r = 1.5, 256  # the kernel's bandwidth in embedding units; 2r = 512 random features
generated = GeneratedSamples(
    {
        "vendi": FKEAVendi(sigma, r, alpha=[1, 2]),  # how many modes: Vendi-1 and RKE (order 2)
        "finc": FINCNovelty(sigma, r, reset_real_features=False),  # which modes it misses or invents, vs the data
        "mmd": FastMMD(sigma, r, reset_real_features=False),  # is the difference real: a two-sample test
    },
    feature=PixelImageFeature(size=8),  # the frozen extractor (Inception, CLIP or DINOv2 for real images)
    references={"finc": "reference_dataloader", "mmd": "val_dataloader"},  # datamodule methods, or loaders
    n_samples=1000,
    label_key="label",  # reference batches carry classes: gallery rows name them
)
torch.manual_seed(0)
data = DigitsImages(batch_size=64, drop_classes=[0, 6])  # the GAN never sees a 0 or a 6
# no validation_step: GeneratedSamples measures at the end of each training epoch (with one, after each validation)
trainer = L.Trainer(max_epochs=2, callbacks=[generated], logger=CSVLogger("logs"), enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(DigitsGAN(), datamodule=data)

print({name: round(value, 3) for name, value in generated.last_values.items()})  # the headline of the last epoch
missing = generated.last_galleries.get("finc/missing")  # the real images of the modes the samples lack
print("\n".join(missing.labels) if missing else "no significant missing mode")
assert {"vendi/vendi_1", "finc/missing_modes", "finc/missing_score_se", "mmd/minus_log10_p"} <= set(
    generated.last_values
)
