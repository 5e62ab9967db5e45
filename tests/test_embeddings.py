"""EmbeddingSource and select: how callbacks find embeddings in a module and parts of a batch."""

import lightning as L
import pytest
import torch

from lightning_spectral.callbacks.embeddings import EmbeddingSource, as_embedding, select


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.visual = torch.nn.Linear(3, 2)


def test_select_parts_of_a_batch():
    x, ids = torch.randn(4, 3), torch.arange(4)
    assert select(x, None) is x
    assert select((x, ids), None) is x and select((x, ids), 1) is ids
    assert select({"image": x, "index": ids}, "index") is ids
    assert select({"image": x}, lambda batch: batch["image"] * 2).shape == (4, 3)
    with pytest.raises(ValueError, match="batch_input"):
        select({"image": x}, None)
    with pytest.raises(ValueError, match="'text'"):
        select({"image": x}, "text")


def test_hook_captures_the_last_call_with_its_graph_and_embeds_on_demand():
    module, source = Module(), EmbeddingSource("model.visual", batch_input="image")
    source.attach(module)
    source.clear()
    assert source.captured() is None
    x = torch.randn(5, 3)
    module.model.visual(x)
    out = module.model.visual(x[:2])
    captured = source.captured()  # the last call (a warning says there were two)
    assert captured is out and captured.requires_grad
    embedded = source.captured_or_embed(module, {"image": x})
    assert embedded.shape == (2, 2)  # still the captured one within the step
    source.clear()
    assert source.captured_or_embed(module, {"image": x}).shape == (5, 2)  # nothing captured: run it
    source.detach()
    module.model.visual(x)
    assert source.captured() is None


def test_function_source_and_errors():
    module = Module()
    source = EmbeddingSource(lambda m, batch: m.model.visual(batch[0]))
    assert source.embed(module, (torch.randn(3, 3),)).shape == (3, 2)
    with pytest.raises(ValueError, match="no submodule 'encoder'"):
        EmbeddingSource("encoder").attach(module)
    with pytest.raises(ValueError, match="submodule name"):
        EmbeddingSource(3)
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        as_embedding(torch.randn(2, 3, 4), "owner")
    assert as_embedding((torch.randn(2, 3), "extra"), "owner").shape == (2, 3)
    with pytest.raises(TypeError, match="not a tensor"):
        as_embedding({"x": 1}, "owner")
