"""Build an ONNX graph of a BERT encoder straight from its safetensors weights.

No torch and no `onnx` package are needed: the weights are read with numpy and the ModelProto is written
with a small protobuf encoder. The graph is written in plain ONNX ops (opset 17) plus
onnxruntime's BiasGelu, laid out so that onnxruntime's own graph optimiser fuses it well; it computes the
same fp32 function as the PyTorch model (the last hidden state; pooling is left to the caller).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64, "I32": np.int32}
_ONNX_FLOAT, _ONNX_INT32, _ONNX_INT64 = 1, 6, 7
_ONNX_DTYPES = {np.dtype(np.float32): _ONNX_FLOAT, np.dtype(np.int32): _ONNX_INT32, np.dtype(np.int64): _ONNX_INT64}
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7
_MASKED = -10000.0  # added to attention scores of padding: exp() of it is exactly 0 in float32
_MS = "com.microsoft"


class UnsupportedModelError(ValueError):
    """The checkpoint is not a plain BERT encoder this builder understands."""


# --- safetensors ---------------------------------------------------------------------------------------


def read_safetensors(path: Path) -> dict[str, Array]:
    """Load every tensor of a .safetensors file as a numpy array (float tensors as float32)."""
    with path.open("rb") as fh:
        (header_len,) = struct.unpack("<Q", fh.read(8))
        header: dict[str, Any] = json.loads(fh.read(header_len))
        data = memoryview(fh.read())
    tensors: dict[str, Array] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]  # a view: no copy
        dtype = _ST_DTYPES.get(info["dtype"], "missing")
        if dtype is None:  # bfloat16: widen the 16 high bits of a float32
            wide = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr: Array = wide.view(np.float32)
        elif isinstance(dtype, str):
            raise UnsupportedModelError(f"tensor {name}: unsupported dtype {info['dtype']}")
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
        arr = arr.reshape(info["shape"])
        tensors[name] = arr.astype(np.float32, copy=False) if arr.dtype.kind == "f" else arr
    return tensors


# --- protobuf encoding (just what ModelProto needs) ----------------------------------------------------
# Field numbers from onnx.proto: ModelProto ir_version=1 producer_name=2 graph=7 opset_import=8;
# OperatorSetIdProto domain=1 version=2; GraphProto node=1 name=2 initializer=5 input=11 output=12;
# NodeProto input=1 output=2 name=3 op_type=4 attribute=5 domain=7; AttributeProto name=1 f=2 i=3 ints=8
# type=20; TensorProto dims=1 data_type=2 name=8 raw_data=9; ValueInfoProto name=1 type=2; TypeProto
# tensor_type=1; TypeProto.Tensor elem_type=1 shape=2; TensorShapeProto dim=1; Dimension dim_value=1
# dim_param=2.


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int_field(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _len_field(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint((field << 3) | 2) + _varint(len(data)) + data


def _float_field(field: int, value: float) -> bytes:
    return _varint((field << 3) | 5) + struct.pack("<f", value)


def _attribute(name: str, value: float | int | list[int]) -> bytes:
    if isinstance(value, list):
        body = b"".join(_int_field(8, v) for v in value)
        return _len_field(1, name) + body + _int_field(20, _ATTR_INTS)
    if isinstance(value, float):
        return _len_field(1, name) + _float_field(2, value) + _int_field(20, _ATTR_FLOAT)
    return _len_field(1, name) + _int_field(3, value) + _int_field(20, _ATTR_INT)


def _tensor(name: str, array: Array) -> bytes:
    arr = np.ascontiguousarray(array)
    dims = b"".join(_int_field(1, d) for d in arr.shape)
    raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    return dims + _int_field(2, _ONNX_DTYPES[arr.dtype]) + _len_field(8, name) + _len_field(9, raw)


def _value_info(name: str, elem_type: int, dims: Iterable[int | str]) -> bytes:
    shape = b"".join(_len_field(1, _len_field(2, d) if isinstance(d, str) else _int_field(1, d)) for d in dims)
    tensor_type = _int_field(1, elem_type) + _len_field(2, shape)
    return _len_field(1, name) + _len_field(2, _len_field(1, tensor_type))


class _Graph:
    """Accumulates nodes and initializers, then serialises a ModelProto."""

    def __init__(self) -> None:
        self.nodes: list[bytes] = []
        self.inits: list[bytes] = []
        self._count = 0

    def const(self, name: str, array: Array) -> str:
        self.inits.append(_tensor(name, array))
        return name

    def node(
        self, op: str, inputs: list[str], domain: str = "", name: str = "", **attrs: float | int | list[int]
    ) -> str:
        """Append a node with one output (named `name`, or generated) and return that output's name."""
        self._count += 1
        out = name or f"{op.lower()}_{self._count}"
        body = b"".join(_len_field(1, i) for i in inputs) + _len_field(2, out)
        body += _len_field(3, f"n{self._count}") + _len_field(4, op)
        body += b"".join(_len_field(5, _attribute(k, v)) for k, v in sorted(attrs.items()))
        if domain:
            body += _len_field(7, domain)
        self.nodes.append(body)
        return out

    def model(self, inputs: list[bytes], outputs: list[bytes]) -> bytes:
        graph = b"".join(_len_field(1, n) for n in self.nodes) + _len_field(2, "bert")
        graph += b"".join(_len_field(5, t) for t in self.inits)
        graph += b"".join(_len_field(11, i) for i in inputs) + b"".join(_len_field(12, o) for o in outputs)
        opsets = _len_field(8, _int_field(2, 17)) + _len_field(8, _len_field(1, _MS) + _int_field(2, 1))
        return _int_field(1, 8) + _len_field(2, "engram") + opsets + _len_field(7, graph)


# --- BERT ------------------------------------------------------------------------------------------------


def _check_config(config: Mapping[str, Any]) -> None:
    problems = []
    if config.get("model_type", "bert") != "bert":
        problems.append(f"model_type={config.get('model_type')}")
    if config.get("hidden_act", "gelu") != "gelu":
        problems.append(f"hidden_act={config.get('hidden_act')}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type={config.get('position_embedding_type')}")
    if int(config["hidden_size"]) % int(config["num_attention_heads"]):
        problems.append("hidden_size not divisible by num_attention_heads")
    if problems:
        raise UnsupportedModelError("not a plain BERT encoder: " + ", ".join(problems))


def _prefix(tensors: Mapping[str, Array]) -> str:
    for prefix in ("", "bert.", "model."):
        if prefix + "embeddings.word_embeddings.weight" in tensors:
            return prefix
    raise UnsupportedModelError("no BERT embeddings found in the checkpoint")


def _i64(*values: int) -> Array:
    return np.array(values, dtype=np.int64)


def _f32(value: float) -> Array:
    return np.array(value, dtype=np.float32)


def _embeddings(g: _Graph, w: Mapping[str, Array], pre: str, eps: float) -> str:
    """word + token type 0 + position embeddings, then LayerNorm (the order BertEmbeddings adds them in)."""
    words = g.node("Gather", [g.const(pre + "word_embeddings.weight", w[pre + "word_embeddings.weight"]), "input_ids"])
    # single sentences have all-zero token_type_ids: add row 0 of the token-type table
    typed = g.node("Add", [words, g.const("token_type_0", w[pre + "token_type_embeddings.weight"][0])])
    seq_len = g.node("Shape", ["input_ids"], start=1, end=2)
    table = g.const(pre + "position_embeddings.weight", w[pre + "position_embeddings.weight"])
    positions = g.node("Slice", [table, g.const("zero", _i64(0)), seq_len, g.const("axis0", _i64(0))])
    summed = g.node("Add", [typed, positions])
    norm = [
        g.const(pre + "LayerNorm.weight", w[pre + "LayerNorm.weight"]),
        g.const(pre + "LayerNorm.bias", w[pre + "LayerNorm.bias"]),
    ]
    return g.node("LayerNormalization", [summed, *norm], axis=-1, epsilon=eps)


def _mask_bias(g: _Graph) -> str:
    """(batch, 1, 1, seq) float: 0 where attention_mask is 1, a large negative number on padding."""
    mask = g.node("Cast", ["attention_mask"], to=_ONNX_FLOAT)
    padding = g.node("Sub", [g.const("one", _f32(1.0)), mask])
    bias = g.node("Mul", [padding, g.const("masked", _f32(_MASKED))])
    return g.node("Unsqueeze", [bias, g.const("axes12", _i64(1, 2))])


class _Block:
    """Emits one post-LN transformer block whose weights live under `pre` in `w`."""

    def __init__(self, g: _Graph, w: Mapping[str, Array], pre: str, heads: int, eps: float) -> None:
        self.g, self.w, self.pre, self.heads, self.eps = g, w, pre, heads, eps

    def weight(self, name: str, transpose: bool = False) -> str:
        array = self.w[self.pre + name]
        return self.g.const(self.pre + name, array.T if transpose else array)

    def linear(self, x: str, name: str) -> str:
        product = self.g.node("MatMul", [x, self.weight(name + ".weight", transpose=True)])
        return self.g.node("Add", [product, self.weight(name + ".bias")])

    def attention(self, x: str, mask_bias: str) -> str:
        g = self.g
        hidden = self.w[self.pre + "attention.self.query.weight"].shape[0]
        head_dim = hidden // self.heads
        split = g.const(self.pre + "split_heads", _i64(0, 0, self.heads, head_dim))

        def heads(name: str, perm: list[int]) -> str:
            projected = self.linear(x, f"attention.self.{name}")
            return g.node("Transpose", [g.node("Reshape", [projected, split])], perm=perm)

        q, k, v = heads("query", [0, 2, 1, 3]), heads("key", [0, 2, 3, 1]), heads("value", [0, 2, 1, 3])
        scores = g.node("Mul", [g.node("MatMul", [q, k]), g.const(self.pre + "scale", _f32(head_dim**-0.5))])
        probs = g.node("Softmax", [g.node("Add", [scores, mask_bias])], axis=-1)
        context = g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        return g.node("Reshape", [context, g.const(self.pre + "merge_heads", _i64(0, 0, hidden))])

    def add_norm(self, x: str, residual: str, name: str) -> str:
        summed = self.g.node("Add", [x, residual])
        norm = [self.weight(name + ".weight"), self.weight(name + ".bias")]
        return self.g.node("LayerNormalization", [summed, *norm], axis=-1, epsilon=self.eps)

    def __call__(self, x: str, mask_bias: str) -> str:
        attended = self.linear(self.attention(x, mask_bias), "attention.output.dense")
        x1 = self.add_norm(attended, x, "attention.output.LayerNorm")
        up = self.g.node("MatMul", [x1, self.weight("intermediate.dense.weight", transpose=True)])
        act = self.g.node("BiasGelu", [up, self.weight("intermediate.dense.bias")], domain=_MS)
        return self.add_norm(self.linear(act, "output.dense"), x1, "output.LayerNorm")


def build_bert_onnx(model_dir: Path) -> bytes:
    """Serialise an ONNX model computing BERT's last hidden state from `model_dir` (config.json and
    model.safetensors, as saved by transformers).

    Inputs: `input_ids` and `attention_mask`, int64 (batch, seq), right-padded; output: `last_hidden_state`
    float32 (batch, seq, hidden). Raises UnsupportedModelError for anything but a plain post-LN BERT with
    absolute positions and erf GELU, and OSError when a file is missing.
    """
    config: dict[str, Any] = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    _check_config(config)
    weights = read_safetensors(model_dir / "model.safetensors")
    prefix = _prefix(weights)
    eps = float(config.get("layer_norm_eps", 1e-12))
    heads = int(config["num_attention_heads"])
    g = _Graph()
    x = _embeddings(g, weights, prefix + "embeddings.", eps)
    mask_bias = _mask_bias(g)
    for i in range(int(config["num_hidden_layers"])):
        x = _Block(g, weights, f"{prefix}encoder.layer.{i}.", heads, eps)(x, mask_bias)
    g.node("Identity", [x], name="last_hidden_state")
    inputs = [_value_info(name, _ONNX_INT64, ("batch", "seq")) for name in ("input_ids", "attention_mask")]
    hidden = int(config["hidden_size"])
    return g.model(inputs, [_value_info("last_hidden_state", _ONNX_FLOAT, ("batch", "seq", hidden))])
