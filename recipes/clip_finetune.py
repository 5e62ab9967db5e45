"""CLIPFineTune: a LightningModule that fine-tunes an open_clip model with its contrastive loss.

The image and text towers are exposed as submodules returning L2-normalised embeddings (``image_tower``,
``text_tower``), so callbacks hook them by name: ``SPECAlign(student="image_tower")``,
``KPCAOODMonitor(embedding="image_tower")``, ``EmbeddingMetrics(embedding="image_tower")``. Validation logs
the contrastive loss and zero-shot accuracy against the datamodule's class prompts.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import lightning as L
import open_clip
import torch
from torch import Tensor
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from torchmetrics.functional.classification import multiclass_accuracy

from lightning_spectral.encoders import ImageTower, TextTower, create_clip


class CLIPFineTune(L.LightningModule):
    """Fine-tune an open_clip model (``model_name`` / ``pretrained`` tag or local checkpoint) contrastively.

    Batches are dicts with ``"image"`` (B, 3, H, W), ``"text"`` (B, context) token ids, and for validation
    ``"label"`` (B,) class ids; zero-shot accuracy classifies images against ``class_prompts`` (set from the
    datamodule's ``prompts`` when it has them).

    Args:
        model_name: open_clip architecture name.
        pretrained: ``None`` (random init), an open_clip tag (needs the hub) or a local checkpoint path.
        model_kwargs: overrides of the architecture config (e.g. a tiny ``vision_cfg`` / ``text_cfg``).
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear warm-up steps, then cosine decay to ``max_steps``.
        max_steps: the end of the cosine decay (the trainer's estimated total when ``None``).
        class_prompts: one caption per class for zero-shot accuracy.
    """

    def __init__(
        self,
        model_name: str = "ViT-B-32",
        pretrained: Optional[str] = None,
        model_kwargs: Optional[dict[str, Any]] = None,
        lr: float = 1e-5,
        weight_decay: float = 0.2,
        warmup_steps: int = 0,
        max_steps: Optional[int] = None,
        class_prompts: Optional[Sequence[str]] = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model, self.preprocess_train, self.preprocess_val, self.tokenizer = create_clip(
            model_name, pretrained=pretrained, **(model_kwargs or {})
        )
        # L2-normalised towers that callbacks hook by name; the model's weights stay under `model.` only
        self.image_tower = ImageTower(self.model, normalize=True, owns_model=False)
        self.text_tower = TextTower(self.model, normalize=True, owns_model=False)
        self.loss = open_clip.ClipLoss()
        self.class_prompts = list(class_prompts) if class_prompts else None

    def setup(self, stage: str) -> None:
        if self.class_prompts is None:
            datamodule = getattr(self.trainer, "datamodule", None)
            self.class_prompts = list(getattr(datamodule, "prompts", []) or []) or None
        # under DDP the contrastive loss sees every rank's features (gradients flow through the gather)
        self.loss = open_clip.ClipLoss(
            local_loss=True, gather_with_grad=True, rank=self.global_rank, world_size=self.trainer.world_size
        )

    def contrastive_loss(self, batch: dict[str, Tensor]) -> Tensor:
        image, text = self.image_tower(batch["image"]), self.text_tower(batch["text"])
        return self.loss(image, text, self.model.logit_scale.exp())

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self.contrastive_loss(batch)
        self.log("train/contrastive", loss, prog_bar=True, batch_size=len(batch["image"]))
        return loss

    def on_validation_epoch_start(self) -> None:
        self._class_text = None
        if self.class_prompts:
            tokens = self.tokenizer(self.class_prompts).to(self.device)
            self._class_text = self.text_tower(tokens)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        if dataloader_idx != 0:
            self.image_tower(batch["image"])  # extra loaders (OOD) are only embedded, for the callbacks
            return
        image = self.image_tower(batch["image"])
        text = self.text_tower(batch["text"])
        loss = open_clip.ClipLoss()(image, text, self.model.logit_scale.exp())
        size = len(batch["image"])
        self.log("val/contrastive", loss, sync_dist=True, add_dataloader_idx=False, batch_size=size)
        if self._class_text is not None and "label" in batch:
            predicted, classes = (image @ self._class_text.T).argmax(1), max(2, len(self._class_text))
            # labels -1 are unknown (the datamodules' convention): left out
            accuracy = multiclass_accuracy(predicted, batch["label"], classes, average="micro", ignore_index=-1)
            self.log(
                "val/zero_shot_acc", accuracy, sync_dist=True, add_dataloader_idx=False, prog_bar=True, batch_size=size
            )

    def configure_optimizers(self) -> Any:
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
        no_decay = [p for n, p in self.model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr,
        )
        total = self.hparams.max_steps or int(self.trainer.estimated_stepping_batches)
        warmup = self.hparams.warmup_steps
        # lr * (step + 1) / warmup for the first `warmup` steps, then a cosine from lr down to 0 at `total`
        scheduler = cosine = CosineAnnealingLR(optimizer, T_max=max(1, total - warmup))
        if warmup > 0:
            linear = LinearLR(optimizer, start_factor=1.0 / warmup, end_factor=1.0, total_iters=max(1, warmup - 1))
            scheduler = SequentialLR(optimizer, [linear, cosine], milestones=[warmup])
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
