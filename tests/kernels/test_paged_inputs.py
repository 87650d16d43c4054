"""The paged kernels' factories and calls as a new user meets them (issue 33): meta tensors, ``validate``, the
index tensors' dtypes, a missing ``block_size``, duplicate slots. The torch backend's own factories, called
directly: what is checked here is the spec's and the torch backend's, whatever backend a machine selects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lazyops._backends.torch import kv_cache_write_tl, paged_attention_tl
from lazyops._errors import KernelInputError

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 4, 1, 8, 2


def attention_inputs(device: str, **dtypes: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Two sequences (3 and 1 tokens, one query each... the first a whole prefill): ``query`` rows, caches of four
    blocks, ``block_table``, ``seq_lens``, ``cu_seqlens_q``, the index tensors int32 unless ``dtypes`` says."""
    query = torch.randn(4, HEADS * HEAD_DIM, device=device)
    key_cache = torch.randn(4, BLOCK, KV_HEADS, HEAD_DIM, device=device)
    value_cache = torch.randn(4, BLOCK, KV_HEADS, HEAD_DIM, device=device)

    def index(name: str, values: list[int] | list[list[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=dtypes.get(name, torch.int32)).to(device)

    block_table = index("block_table", [[0, 1], [2, 3]])
    seq_lens = index("seq_lens", [3, 1])
    cu_seqlens_q = index("cu_seqlens_q", [0, 3, 4])
    return query, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q


def write_inputs(device: str, slots: list[int], slot_dtype: torch.dtype = torch.int64) -> tuple[torch.Tensor, ...]:
    key = torch.randn(len(slots), KV_HEADS * HEAD_DIM, device=device)
    value = torch.randn(len(slots), KV_HEADS * HEAD_DIM, device=device)
    key_cache = torch.zeros(4, BLOCK, KV_HEADS, HEAD_DIM, device=device)
    value_cache = torch.zeros(4, BLOCK, KV_HEADS, HEAD_DIM, device=device)
    return key, value, key_cache, value_cache, torch.tensor(slots, dtype=slot_dtype).to(device)


# -- item 12: the meta device ---------------------------------------------------------------------------------------
def test_attention_on_meta_tensors_returns_a_meta_output():
    kernel = paged_attention_tl(HEADS, KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK)
    out = kernel(*attention_inputs("meta"))
    assert out.device.type == "meta" and out.shape == (4, HEADS * HEAD_DIM) and out.dtype is torch.float32


def test_attention_on_meta_tensors_with_validate_reads_no_value():
    kernel = paged_attention_tl(HEADS, KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK, validate=True)
    assert kernel(*attention_inputs("meta")).device.type == "meta"


def test_a_cache_write_on_meta_tensors_returns():
    kernel = kv_cache_write_tl(KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK)
    kernel(*write_inputs("meta", [0, 3, 5]))


# -- item 13: validate is a bool ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["false", "False", 0, 1, None, "yes"])
def test_validate_takes_a_real_bool(value):
    with pytest.raises(KernelInputError, match=r"validate must be True or False, got"):
        paged_attention_tl(HEADS, KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK, validate=value)


@pytest.mark.parametrize("value", [True, False])
def test_validate_as_a_bool_is_kept(value):
    from lazyops.specs import spec

    config = spec("paged_attention_tl").bind(HEADS, KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK, validate=value)
    assert config.validate is value


# -- item 13: duplicate slots, documented ----------------------------------------------------------------------------
def test_duplicate_slots_are_documented_in_the_readme_and_the_spec():
    import lazyops.specs.kv_cache_write as module

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "**Duplicate slots**" in readme and "reshape_and_cache_flash" in readme
    assert "mapped to one slot" in (module.__doc__ or "")
    assert "mapped to one slot" in (module.spec.factory_doc or "")


def test_duplicate_slots_on_the_cpu_keep_the_last_token():
    key, value, key_cache, value_cache, slots = write_inputs("cpu", [5, 1, 5])
    kv_cache_write_tl(KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK)(key, value, key_cache, value_cache, slots)
    assert torch.equal(key_cache.view(-1, KV_HEADS * HEAD_DIM)[5], key[2])
    assert torch.equal(value_cache.view(-1, KV_HEADS * HEAD_DIM)[5], value[2])


# -- a new user: index tensors of the wrong dtype --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["block_table", "seq_lens", "cu_seqlens_q"])
def test_an_attention_index_of_the_wrong_dtype_names_the_conversion(name):
    kernel = paged_attention_tl(HEADS, KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK)
    with pytest.raises(KernelInputError) as raised:
        kernel(*attention_inputs("cpu", **{name: torch.int64}))
    message = str(raised.value)
    assert f"{name}.to(torch.int32)" in message and "another dtype" not in message


def test_a_slot_mapping_of_the_wrong_dtype_names_the_conversion():
    kernel = kv_cache_write_tl(KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK)
    with pytest.raises(KernelInputError) as raised:
        kernel(*write_inputs("cpu", [0, 3], slot_dtype=torch.int32))
    message = str(raised.value)
    assert "slot_mapping.to(torch.int64)" in message and "another dtype" not in message


def test_a_scale_of_the_wrong_dtype_names_the_conversion():
    kernel = kv_cache_write_tl(KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK, cache_dtype=torch.float8_e4m3fn)
    key, value, _, _, slots = write_inputs("cpu", [0, 3])
    caches = [torch.zeros(4, BLOCK, KV_HEADS, HEAD_DIM).to(torch.float8_e4m3fn) for _ in range(2)]
    scale = torch.ones(1, dtype=torch.float16)
    with pytest.raises(KernelInputError, match=re.escape("k_scale.to(torch.float32)")):
        kernel(key, value, *caches, slots, k_scale=scale, v_scale=scale.float())


def test_an_activation_of_the_wrong_dtype_still_names_another_kernel():
    kernel = paged_attention_tl(HEADS, KV_HEADS, HEAD_DIM, torch.float32, block_size=BLOCK)
    query, *rest = attention_inputs("cpu")
    with pytest.raises(KernelInputError, match="another kernel"):
        kernel(query.half(), *rest)


# -- a new user: a missing block_size -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("factory", "args"),
    [
        (paged_attention_tl, (HEADS, KV_HEADS, HEAD_DIM, torch.float32)),
        (kv_cache_write_tl, (KV_HEADS, HEAD_DIM, "float32")),
    ],
    ids=["paged_attention_tl", "kv_cache_write_tl"],
)
def test_a_missing_block_size_names_the_factory(factory, args):
    with pytest.raises(TypeError) as raised:
        factory(*args)
    message = str(raised.value)
    assert message.startswith(f"{factory.__name__}(): ") and "block_size" in message and "required" in message
    assert "bind" not in message and "Spec" not in message


def test_a_missing_block_size_through_the_namespace_names_the_factory():
    import lazyops

    with pytest.raises(TypeError, match=r"^paged_attention_tl\(\): .*block_size= is a required keyword argument"):
        lazyops.which("paged_attention_tl", HEADS, KV_HEADS, HEAD_DIM, "float32")


def test_the_readme_tables_give_block_size_no_default():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "block_size=16)(" not in readme
    assert "`block_size` (`B` in the table above) has no default" in readme
