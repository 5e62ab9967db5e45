"""ConditionalVendi: diversity per prompt, the prompts that collapsed, and the callback of a conditional generator."""

import torch

from lightning_spectral.callbacks import GeneratedSamples
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import ConditionalVendi, FKEAVendi

generator = torch.Generator().manual_seed(0)
metric = ConditionalVendi(sigma=1.5, prompt_sigma=0.1, n_frequencies=1024, alpha=[1, 2], num_classes=10)
labels = torch.arange(1000) % 10  # the prompt of each sample: integer labels (one-hot inside)
samples = 4 * torch.randn(10, 64, generator=generator)[labels] + 0.1 * torch.randn(1000, 64, generator=generator)
samples[labels == 3] = samples[labels == 3][0]  # prompt 3 collapsed to one sample
metric.update(samples, labels)  # or update(samples, caption_embeddings, labels=labels)
values = metric.reading().summary()  # "", information, vendi, prompt_vendi, min_prompt_vendi, prompt (per label)
print({order: round(float(v), 2) for order, v in values[""].items()})  # Conditional-Vendi-1, Conditional-RKE
worst = metric.reading().least_diverse(2)  # [(label, vendi, samples), ...], lowest first
print(worst)
assert worst[0][0] == 3 and abs(worst[0][1] - 1.0) < 1e-6

# During training: sample i is drawn for prompt i % 10, as module.sample(prompts, generator=g)
captions = [f"a photo of the digit {k}" for k in range(10)]
callback = GeneratedSamples(
    {"vendi": FKEAVendi(1.52, 512, alpha=[1, 2]),
     "cond": ConditionalVendi(1.52, 0.1, 512, alpha=[1, 2], num_classes=10, prompt_names=captions)},
    feature=PixelImageFeature(8),
    prompts=torch.arange(10),
    n_samples=1000,
)
