# The kernels this backend exports: lazyops reads this file (without importing anything) to know them.
from .add_rmsnorm import add_rmsnorm_tl as add_rmsnorm_tl
from .add_rmsnorm_fp8 import add_rmsnorm_fp8_tl as add_rmsnorm_fp8_tl
from .gelu_and_mul import gelu_and_mul_tl as gelu_and_mul_tl
from .kv_cache_write import kv_cache_write_tl as kv_cache_write_tl
from .layernorm import layernorm_tl as layernorm_tl
from .matmul import matmul_tl as matmul_tl
from .paged_attention import paged_attention_tl as paged_attention_tl
from .rmsnorm import rmsnorm_tl as rmsnorm_tl
from .rmsnorm_fp8 import rmsnorm_fp8_tl as rmsnorm_fp8_tl
from .rope import rope_tl as rope_tl
from .silu_and_mul import silu_and_mul_tl as silu_and_mul_tl
from .softmax import softmax_tl as softmax_tl

# Not kernels (neither lazy_loader nor lazyops reads these lines): the module's own functions, for type checkers.
def interpreter_requested() -> bool: ...
def unavailable_reason() -> str | None: ...
