"""ortops.torch.add_layer_norm and ortops::AddLayerNorm against torch.nn.functional.layer_norm
of the sum."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ortops.torch

from roundtrip import EXPORTERS, custom_nodes, export, run_onnx

TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def reference(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor | None, c: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.layer_norm(a + b, [a.shape[-1]], w, c, 1e-5)


def inputs(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    c = shape[-1]
    return [
        torch.randn(*shape, generator=g, dtype=dtype) * 3 + 1,
        torch.randn(*shape, generator=g, dtype=dtype),
        torch.rand(c, generator=g, dtype=dtype) + 0.5,
        torch.randn(c, generator=g, dtype=dtype),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("residual_shape", [(2, 7, 33), (1, 7, 33), (33,)])
def test_eager_is_torch_layer_norm_of_the_sum(dtype: torch.dtype, residual_shape: tuple[int, ...]) -> None:
    a, b, w, c = inputs((2, 7, 33), dtype)
    a = a.transpose(0, 1).contiguous().transpose(0, 1)  # non-contiguous
    b = torch.randn(residual_shape, dtype=dtype)
    torch.testing.assert_close(ortops.torch.add_layer_norm(a, b, w, c), reference(a, b, w, c), **TOLERANCE[dtype])
    torch.testing.assert_close(ortops.torch.add_layer_norm(a, b), reference(a, b, None, None), **TOLERANCE[dtype])


def test_gradients_are_torchs() -> None:
    tensors = [t.requires_grad_() for t in inputs((3, 4, 6), torch.float64, seed=2)]
    torch.autograd.gradcheck(lambda *t: ortops.torch.add_layer_norm(*t), tensors)
    grad = torch.randn(3, 4, 6, dtype=torch.float64)
    got = torch.autograd.grad(ortops.torch.add_layer_norm(*tensors), tensors, grad)
    want = torch.autograd.grad(reference(*tensors), tensors, grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_a_residual_that_does_not_broadcast_to_the_input_is_an_error() -> None:
    a, b, w, c = inputs((1, 4, 8), torch.float32)
    with pytest.raises(ValueError, match=r"ortops.add_layer_norm: input 'B' must have the shape of 'A', \[1, 4, 8\]"):
        ortops.torch.add_layer_norm(a, b.expand(3, 4, 8), w, c)


class PostNorm(torch.nn.Module):
    def __init__(self, channels: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(channels, channels, dtype=dtype)
        self.weight = torch.nn.Parameter(torch.rand(channels, dtype=dtype) + 0.5)
        self.bias = torch.nn.Parameter(torch.randn(channels, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ortops.torch.add_layer_norm(x, self.linear(x), self.weight, self.bias, 1e-5)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_export_roundtrip(exporter: str, dtype: torch.dtype) -> None:
    model = PostNorm(16, dtype).eval()
    x = inputs((2, 5, 16), dtype)[0]
    onnx_model = export(model, (x,), exporter, dynamic_dims=[{0: "n", 1: "l"}])
    assert custom_nodes(onnx_model) == ["ortops::AddLayerNorm"]
    x2 = inputs((3, 9, 16), dtype, seed=1)[0]
    (got,) = run_onnx(onnx_model, (x2,))
    with torch.no_grad():
        expected = reference(x2, model.linear(x2), model.weight, model.bias)
    np.testing.assert_allclose(got, expected.numpy(), **TOLERANCE[dtype])
