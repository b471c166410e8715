"""The package without a GPU: import, operator schemas, fake shapes (torch.compile's view), and
argument errors that come before any launch."""
import pytest
import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.distributed.fake_pg import FakeStore

import tilelink  # noqa: F401  (loads the operators)


def test_init_needs_torch_distributed():
    if dist.is_initialized():
        pytest.skip("a process group exists in this process")
    with pytest.raises(RuntimeError, match="torch.distributed is not initialised"):
        tilelink.init()


@pytest.fixture(scope="module")
def fake_group():
    """A torch.distributed world of 4 ranks that exists only for shapes (no communication)."""
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    yield dist.group.WORLD.group_name
    dist.destroy_process_group()


def test_schemas():
    assert str(torch.ops.tilelink.ag_gemm.default._schema) == (
        "tilelink::ag_gemm(Tensor x_shard, Tensor weight, str group_name) -> Tensor")
    assert str(torch.ops.tilelink.gemm_rs.default._schema) == (
        "tilelink::gemm_rs(Tensor x, Tensor weight, str group_name) -> Tensor")
    assert str(torch.ops.tilelink.gemm_ar.default._schema) == (
        "tilelink::gemm_ar(Tensor x, Tensor weight, str group_name) -> Tensor")
    schema = torch.ops.tilelink.gemm_ar_rmsnorm.default._schema
    assert [(a.name, str(a.type)) for a in schema.arguments] == [
        ("x", "Tensor"), ("weight", "Tensor"), ("residual", "Tensor"), ("norm_weight", "Tensor"),
        ("group_name", "str"), ("eps", "float")]
    assert schema.arguments[-1].default_value == pytest.approx(1e-6) and len(schema.returns) == 2
    assert str(torch.ops.tilelink.mlp.default._schema) == (
        "tilelink::mlp(Tensor x_shard, Tensor w1, Tensor w2, str group_name, str activation=\"swiglu\") -> Tensor")
    assert str(torch.ops.tilelink.moe.default._schema) == (
        "tilelink::moe(Tensor x_shard, Tensor topk_ids, Tensor topk_weights, Tensor w1, Tensor w2, str group_name, "
        "str activation=\"swiglu\") -> Tensor")
    assert str(torch.ops.tilelink.sp_attention.default._schema) == (
        "tilelink::sp_attention(Tensor q, Tensor k, Tensor v, str group_name, bool causal=True, "
        "str layout=\"zigzag\") -> (Tensor, Tensor)")


@pytest.mark.parametrize("m_per_rank,n,k", [(128, 256, 64), (37, 96, 200)])
def test_ag_gemm_fake_shape(fake_group, m_per_rank, n, k):
    with FakeTensorMode():
        x = torch.empty(m_per_rank, k, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
        y = torch.ops.tilelink.ag_gemm(x, w, fake_group)
    assert tuple(y.shape) == (4 * m_per_rank, n) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("m,n,k", [(512, 256, 64), (1024, 96, 200)])
def test_gemm_rs_fake_shape(fake_group, m, n, k):
    with FakeTensorMode():
        x = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
        y = torch.ops.tilelink.gemm_rs(x, w, fake_group)
    assert tuple(y.shape) == (m // 4, n)


@pytest.mark.parametrize("m", [1, 7, 129])
def test_gemm_ar_fake_shapes_at_any_m(fake_group, m):
    with FakeTensorMode():
        x = torch.empty(m, 64, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(96, 64, dtype=torch.bfloat16, device="cuda")
        y = torch.ops.tilelink.gemm_ar(x, w, fake_group)
        res = torch.empty(m, 96, dtype=torch.bfloat16, device="cuda")
        g = torch.empty(96, dtype=torch.bfloat16, device="cuda")
        out, h = torch.ops.tilelink.gemm_ar_rmsnorm(x, w, res, g, fake_group, 1e-5)
    assert tuple(y.shape) == (m, 96) and y.dtype == torch.bfloat16
    assert tuple(out.shape) == (m, 96) and tuple(h.shape) == (m, 96)


def test_gemm_ar_rmsnorm_fake_errors_name_the_argument(fake_group):
    def empty(*shape, dtype=torch.bfloat16):
        return torch.empty(*shape, dtype=dtype, device="cuda")

    with FakeTensorMode():
        x, w = empty(8, 64), empty(96, 64)
        with pytest.raises(ValueError, match="'residual' has shape \\[8, 48\\]: expected \\[8, 96\\]"):
            torch.ops.tilelink.gemm_ar_rmsnorm(x, w, empty(8, 48), empty(96), fake_group)
        with pytest.raises(ValueError, match="'norm_weight' has shape \\[95\\]: expected \\[96\\]"):
            torch.ops.tilelink.gemm_ar_rmsnorm(x, w, empty(8, 96), empty(95), fake_group)
        with pytest.raises(ValueError, match="'norm_weight' has dtype torch.float32"):
            torch.ops.tilelink.gemm_ar_rmsnorm(x, w, empty(8, 96), empty(96, dtype=torch.float32), fake_group)
        with pytest.raises(ValueError, match="'eps' = 0.0: expected a positive value"):
            torch.ops.tilelink.gemm_ar_rmsnorm(x, w, empty(8, 96), empty(96), fake_group, 0.0)
        with pytest.raises(ValueError, match="'weight' has 32 columns: expected x's 64"):
            torch.ops.tilelink.gemm_ar(x, empty(96, 32), fake_group)


@pytest.mark.parametrize("activation,fc1_rows", [("swiglu", 2 * 96), ("gelu", 96)])
def test_mlp_fake_shape(fake_group, activation, fc1_rows):
    with FakeTensorMode():
        x = torch.empty(256, 64, dtype=torch.bfloat16, device="cuda")
        w1 = torch.empty(fc1_rows, 64, dtype=torch.bfloat16, device="cuda")
        w2 = torch.empty(64, 96, dtype=torch.bfloat16, device="cuda")
        y = torch.ops.tilelink.mlp(x, w1, w2, fake_group, activation)
    assert tuple(y.shape) == (256, 64) and y.dtype == torch.bfloat16


def test_mlp_fake_errors_name_the_argument(fake_group):
    def empty(*shape):
        return torch.empty(*shape, dtype=torch.bfloat16, device="cuda")

    with FakeTensorMode():
        x, w1, w2 = empty(128, 64), empty(192, 64), empty(64, 96)
        with pytest.raises(ValueError, match="'activation' = 'relu': expected 'swiglu' or 'gelu'"):
            torch.ops.tilelink.mlp(x, w1, w2, fake_group, "relu")
        with pytest.raises(ValueError, match="'w1' has 32 columns: expected x_shard's 64"):
            torch.ops.tilelink.mlp(x, empty(192, 32), w2, fake_group)
        with pytest.raises(ValueError, match="'w2' has 100 columns \\(I/P\\): expected a multiple of 8"):
            torch.ops.tilelink.mlp(x, empty(200, 64), empty(64, 100), fake_group)
        with pytest.raises(ValueError, match="'w2' has shape \\(64, 48\\): expected \\[64, 96\\]"):
            torch.ops.tilelink.mlp(x, w1, empty(64, 48), fake_group)
        # Any rows per rank: the fake output follows x_shard.
        assert torch.ops.tilelink.mlp(empty(7, 64), w1, w2, fake_group).shape == (7, 64)


def test_fake_errors_name_the_argument(fake_group):
    with FakeTensorMode():
        x = torch.empty(64, 32, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match="'weight' has 16 columns: expected x_shard's 32"):
            torch.ops.tilelink.ag_gemm(x, torch.empty(8, 16, dtype=torch.bfloat16, device="cuda"), fake_group)
        with pytest.raises(ValueError, match="'x_shard' has dtype torch.float32"):
            torch.ops.tilelink.ag_gemm(x.float(), torch.empty(8, 32, dtype=torch.bfloat16, device="cuda"), fake_group)
        with pytest.raises(ValueError, match="'x' has 642 rows: expected a positive multiple of the group's 4"):
            torch.ops.tilelink.gemm_rs(torch.empty(642, 32, dtype=torch.bfloat16, device="cuda"),
                                       torch.empty(8, 32, dtype=torch.bfloat16, device="cuda"), fake_group)
        # Equal blocks of any row count.
        assert torch.ops.tilelink.gemm_rs(torch.empty(12, 32, dtype=torch.bfloat16, device="cuda"),
                                          torch.empty(8, 32, dtype=torch.bfloat16, device="cuda"),
                                          fake_group).shape == (3, 8)
        with pytest.raises(ValueError, match="'x_shard' has 36 columns \\(K\\): expected a multiple of 8"):
            torch.ops.tilelink.ag_gemm(torch.empty(64, 36, dtype=torch.bfloat16, device="cuda"),
                                       torch.empty(8, 36, dtype=torch.bfloat16, device="cuda"), fake_group)
        with pytest.raises(ValueError, match="'weight' has 12 rows \\(N\\): expected a multiple of 8"):
            torch.ops.tilelink.ag_gemm(x, torch.empty(12, 32, dtype=torch.bfloat16, device="cuda"), fake_group)
        with pytest.raises(ValueError, match="'group_name'"):
            torch.ops.tilelink.ag_gemm(x, torch.empty(8, 32, dtype=torch.bfloat16, device="cuda"), "no-such-group")


def test_compile_fullgraph_traces_a_step(fake_group):
    """torch.compile(fullgraph=True) of AG+GEMM -> SiLU -> GEMM+RS: one graph, no break."""
    import torch._dynamo.testing

    def step(x, w1, w2):
        h = torch.ops.tilelink.ag_gemm(x, w1, fake_group)
        return torch.ops.tilelink.gemm_rs(torch.nn.functional.silu(h), w2, fake_group)

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    x = torch.empty(128, 64, dtype=torch.bfloat16, device="meta")
    w1 = torch.empty(128, 64, dtype=torch.bfloat16, device="meta")
    w2 = torch.empty(64, 128, dtype=torch.bfloat16, device="meta")
    y = compiled(x, w1, w2)
    assert tuple(y.shape) == (128, 64) and counter.frame_count == 1


def test_real_call_refuses_cpu_tensors_before_any_launch():
    x = torch.zeros(64, 32, dtype=torch.bfloat16)
    w = torch.zeros(16, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'x_shard' is on cpu: expected a CUDA tensor"):
        torch.ops.tilelink.ag_gemm(x, w, "g")
    with pytest.raises(ValueError, match="argument 'x' is on cpu"):
        torch.ops.tilelink.gemm_rs(x, w, "g")
    with pytest.raises(ValueError, match="argument 'x' is on cpu"):
        torch.ops.tilelink.gemm_ar(x, w, "g")
    with pytest.raises(ValueError, match="argument 'x' is on cpu"):
        torch.ops.tilelink.gemm_ar_rmsnorm(x, w, torch.zeros(64, 16, dtype=torch.bfloat16),
                                           torch.zeros(16, dtype=torch.bfloat16), "g")
    with pytest.raises(ValueError, match="argument 'x_shard' is on cpu"):
        torch.ops.tilelink.mlp(x, w, torch.zeros(32, 8, dtype=torch.bfloat16), "g")
    with pytest.raises(ValueError, match="argument 'activation' = 'relu'"):
        torch.ops.tilelink.mlp(x, w, torch.zeros(32, 8, dtype=torch.bfloat16), "g", "relu")


def test_synchronize_refuses_a_group_not_initialised():
    with pytest.raises(ValueError, match="argument 'group_name' = 'nope': expected a group this process initialised"):
        tilelink.synchronize("nope")


def test_transport_refuses_a_group_not_initialised():
    with pytest.raises(ValueError, match="tilelink.transport: argument 'group_name' = 'nope'"):
        tilelink.transport("nope")
    assert "_transport" in dir(torch.ops.tilelink)


@pytest.mark.parametrize("q_heads,kv_heads,d", [(8, 2, 128), (4, 4, 64)])
def test_sp_attention_fake_shape(fake_group, q_heads, kv_heads, d):
    with FakeTensorMode():
        q = torch.empty(256, q_heads, d, dtype=torch.bfloat16, device="cuda")
        kv = torch.empty(256, kv_heads, d, dtype=torch.bfloat16, device="cuda")
        o, lse = torch.ops.tilelink.sp_attention(q, kv, kv, fake_group)
    assert tuple(o.shape) == (256, q_heads, d) and o.dtype == torch.bfloat16
    assert tuple(lse.shape) == (q_heads, 256) and lse.dtype == torch.float32


def test_sp_attention_errors_name_the_argument(fake_group):
    with FakeTensorMode():
        q = torch.empty(256, 8, 64, dtype=torch.bfloat16, device="cuda")
        kv = torch.empty(256, 2, 64, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match="argument 'layout' = 'striped'"):
            torch.ops.tilelink.sp_attention(q, kv, kv, fake_group, True, "striped")
        with pytest.raises(ValueError, match="argument 'q' has 8 heads: expected a multiple of k's 3"):
            k3 = torch.empty(256, 3, 64, dtype=torch.bfloat16, device="cuda")
            torch.ops.tilelink.sp_attention(q, k3, k3, fake_group)
        with pytest.raises(ValueError, match="arguments 'k' and 'v' have shapes"):
            torch.ops.tilelink.sp_attention(q, kv, torch.empty(128, 2, 64, dtype=torch.bfloat16, device="cuda"), fake_group)
        with pytest.raises(ValueError, match="argument 'k' has 2 dimensions"):
            torch.ops.tilelink.sp_attention(q, kv[:, 0], kv, fake_group)
    # The real operator: the same checks before any launch.
    qc = torch.zeros(256, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'layout' = 'striped'"):
        torch.ops.tilelink.sp_attention(qc, qc, qc, "g", True, "striped")
    with pytest.raises(ValueError, match="argument 'group_name' = 'g'"):
        torch.ops.tilelink.sp_attention(qc, qc, qc, "g")


def _moe_operands(tpr=64, hidden=64, i_local=32, experts=8, topk=2, rows=None, activation="swiglu",
                  ids_dtype=torch.int64, device="cuda"):
    fc1 = 2 * i_local if activation == "swiglu" else i_local
    rows = tpr if rows is None else rows
    return (torch.empty(tpr, hidden, dtype=torch.bfloat16, device=device),
            torch.empty(rows, topk, dtype=ids_dtype, device=device),
            torch.empty(rows, topk, dtype=torch.float32, device=device),
            torch.empty(experts, fc1, hidden, dtype=torch.bfloat16, device=device),
            torch.empty(experts, hidden, i_local, dtype=torch.bfloat16, device=device))


@pytest.mark.parametrize("activation", ["swiglu", "gelu"])
@pytest.mark.parametrize("routing_rows", ["own", "all"])
def test_moe_fake_shape(fake_group, activation, routing_rows):
    with FakeTensorMode():
        ops = _moe_operands(tpr=37, rows=37 if routing_rows == "own" else 4 * 37, activation=activation)
        y = torch.ops.tilelink.moe(*ops, fake_group, activation)
    assert tuple(y.shape) == (37, 64) and y.dtype == torch.bfloat16


def test_moe_errors_name_the_argument(fake_group):
    with FakeTensorMode():
        x, ids, wts, w1, w2 = _moe_operands()
        cases = [
            ("'activation' = 'relu'", (x, ids, wts, w1, w2, fake_group, "relu")),
            ("'topk_ids' has 50 rows: expected x_shard's 64 \\(this rank's tokens\\) or 256",
             (x, ids[:50], wts[:50], w1, w2, fake_group)),
            ("'topk_ids' has dtype torch.float32", (x, wts, wts, w1, w2, fake_group)),
            ("'topk_weights' has dtype torch.int64", (x, ids, ids, w1, w2, fake_group)),
            ("'topk_weights' has shape \\[64, 3\\]: expected topk_ids' \\[64, 2\\]",
             (x, ids, torch.empty(64, 3, device="cuda"), w1, w2, fake_group)),
            ("'topk_ids' has 9 columns \\(k\\): expected 1 to the 8 experts",
             (x, torch.empty(64, 9, dtype=torch.int64, device="cuda"), torch.empty(64, 9, device="cuda"), w1, w2,
              fake_group)),
            ("'w2' has shape \\[8, 64, 16\\]: expected \\[8, 64, 32\\]",
             (x, ids, wts, w1, torch.empty(8, 64, 16, dtype=torch.bfloat16, device="cuda"), fake_group)),
            ("'w1' has 2 dimensions: expected 3", (x, ids, wts, w1[0], w2, fake_group)),
            ("'w1' has 12 gate rows per expert \\(I/P\\): expected a multiple of 8",
             (x, ids, wts, torch.empty(8, 24, 64, dtype=torch.bfloat16, device="cuda"), w2, fake_group)),
            ("'x_shard' has dtype torch.float32", (x.float(), ids, wts, w1, w2, fake_group)),
            ("'group_name'", (x, ids, wts, w1, w2, "no-such-group")),
        ]
        for message, args in cases:
            with pytest.raises(ValueError, match=message):
                torch.ops.tilelink.moe(*args)
    # The real operator: the same kind of checks, before any launch or group lookup of a CUDA op.
    x, ids, wts, w1, w2 = _moe_operands(device="cpu")
    with pytest.raises(ValueError, match="argument 'activation' = 'relu'"):
        torch.ops.tilelink.moe(x, ids, wts, w1, w2, "g", "relu")
    with pytest.raises(ValueError, match="argument 'x_shard' is on cpu: expected a CUDA tensor"):
        torch.ops.tilelink.moe(x, ids, wts, w1, w2, "g")


def test_compile_fullgraph_traces_an_moe_layer(fake_group):
    """A router on this rank's tokens, then the MoE operator, under torch.compile(fullgraph=True)."""
    import torch._dynamo.testing

    def layer(x, router, w1, w2):
        weights, ids = torch.topk(torch.softmax(x.float() @ router.float().T, dim=-1), 2, dim=-1)
        return torch.ops.tilelink.moe(x, ids, weights, w1, w2, fake_group)

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(layer, backend=counter, fullgraph=True)
    x, _, _, w1, w2 = _moe_operands(device="meta")
    y = compiled(x, torch.empty(8, 64, dtype=torch.bfloat16, device="meta"), w1, w2)
    assert tuple(y.shape) == (64, 64) and counter.frame_count == 1


# ---- FP8 (issue 22) ---------------------------------------------------------------------------------


def test_fp8_schemas():
    assert str(torch.ops.tilelink.quantize_weight.default._schema) == (
        "tilelink::quantize_weight(Tensor weight, str scaling=\"row\") -> (Tensor, Tensor)")
    assert str(torch.ops.tilelink.ag_gemm_fp8.default._schema) == (
        "tilelink::ag_gemm_fp8(Tensor x_shard, Tensor weight, Tensor weight_scale, str group_name, "
        "str scaling=\"row\") -> Tensor")
    assert str(torch.ops.tilelink.gemm_rs_fp8.default._schema) == (
        "tilelink::gemm_rs_fp8(Tensor x, Tensor weight, Tensor weight_scale, str group_name, "
        "str scaling=\"row\") -> Tensor")


@pytest.mark.parametrize("scaling,scale_shape", [("tensor", (1,)), ("row", (264,)), ("block", (3, 3))])
def test_fp8_fake_shapes(fake_group, scaling, scale_shape):
    with FakeTensorMode():
        w = torch.empty(264, 384, dtype=torch.bfloat16, device="cuda")
        w8, scale = torch.ops.tilelink.quantize_weight(w, scaling)
        assert w8.dtype == torch.float8_e4m3fn and tuple(w8.shape) == (264, 384)
        assert scale.dtype == torch.float32 and tuple(scale.shape) == scale_shape
        x = torch.empty(512, 384, dtype=torch.bfloat16, device="cuda")
        y = torch.ops.tilelink.gemm_rs_fp8(x, w8, scale, fake_group, scaling)
        assert tuple(y.shape) == (128, 264) and y.dtype == torch.bfloat16
        if scaling != "tensor":
            y = torch.ops.tilelink.ag_gemm_fp8(x, w8, scale, fake_group, scaling)
            assert tuple(y.shape) == (2048, 264) and y.dtype == torch.bfloat16


def test_fp8_fake_errors_name_the_argument(fake_group):
    with FakeTensorMode():
        x = torch.empty(64, 256, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(64, 256, dtype=torch.bfloat16, device="cuda")
        w8 = torch.empty(64, 256, dtype=torch.float8_e4m3fn, device="cuda")
        rows = torch.empty(64, dtype=torch.float32, device="cuda")
        with pytest.raises(ValueError, match="argument 'scaling' = 'col'"):
            torch.ops.tilelink.quantize_weight(w, "col")
        with pytest.raises(ValueError, match="argument 'k' = 200: expected a multiple of 16"):
            torch.ops.tilelink.quantize_weight(torch.empty(64, 200, dtype=torch.bfloat16, device="cuda"), "row")
        with pytest.raises(ValueError, match="argument 'k' = 192: expected a multiple of 128"):
            torch.ops.tilelink.quantize_weight(torch.empty(64, 192, dtype=torch.bfloat16, device="cuda"), "block")
        with pytest.raises(ValueError, match="argument 'weight' has dtype torch.bfloat16: expected torch.float8_e4m3fn"):
            torch.ops.tilelink.gemm_rs_fp8(x, w, rows, fake_group)
        with pytest.raises(ValueError, match="argument 'weight_scale' has 64 elements: expected 1 for tensor"):
            torch.ops.tilelink.gemm_rs_fp8(x, w8, rows, fake_group, "tensor")
        with pytest.raises(ValueError, match="argument 'scaling' = 'tensor'"):
            torch.ops.tilelink.ag_gemm_fp8(x, w8, rows[:1], fake_group, "tensor")
        with pytest.raises(ValueError, match="argument 'x' has 66 rows: expected a positive multiple"):
            torch.ops.tilelink.gemm_rs_fp8(torch.empty(66, 256, dtype=torch.bfloat16, device="cuda"), w8, rows,
                                           fake_group)


def test_compile_fullgraph_traces_an_fp8_step(fake_group):
    """torch.compile(fullgraph=True) of FP8 AG+GEMM -> SiLU -> FP8 GEMM+RS: one graph, no break."""
    import torch._dynamo.testing

    def step(x, w1, s1, w2, s2):
        h = torch.ops.tilelink.ag_gemm_fp8(x, w1, s1, fake_group, "row")
        return torch.ops.tilelink.gemm_rs_fp8(torch.nn.functional.silu(h), w2, s2, fake_group, "row")

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    x = torch.empty(128, 64, dtype=torch.bfloat16, device="meta")
    w1 = torch.empty(128, 64, dtype=torch.float8_e4m3fn, device="meta")
    s1 = torch.empty(128, dtype=torch.float32, device="meta")
    w2 = torch.empty(64, 128, dtype=torch.float8_e4m3fn, device="meta")
    s2 = torch.empty(64, dtype=torch.float32, device="meta")
    y = compiled(x, w1, s1, w2, s2)
    assert tuple(y.shape) == (128, 64) and counter.frame_count == 1


def test_fp8_real_calls_refuse_cpu_tensors_before_any_launch():
    x = torch.zeros(64, 256, dtype=torch.bfloat16)
    w8 = torch.zeros(64, 256, dtype=torch.float8_e4m3fn)
    s = torch.zeros(64, dtype=torch.float32)
    with pytest.raises(ValueError, match="argument 'weight' is on cpu: expected a CUDA tensor"):
        torch.ops.tilelink.quantize_weight(x, "row")
    with pytest.raises(ValueError, match="argument 'x_shard' is on cpu"):
        torch.ops.tilelink.ag_gemm_fp8(x, w8, s, "g", "row")
    with pytest.raises(ValueError, match="argument 'x' is on cpu"):
        torch.ops.tilelink.gemm_rs_fp8(x, w8, s, "g", "row")
    with pytest.raises(ValueError, match="argument 'scaling' = 'tensor'"):
        torch.ops.tilelink.ag_gemm_fp8(x, w8, s[:1], "g", "tensor")
