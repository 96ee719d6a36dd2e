"""Tree attention and KV compaction. The torch reference is always available and is the oracle;
Triton and FlashInfer are imported lazily, behind capability checks."""

from .kv_commit import commit_accepted_kv, commit_accepted_kv_ragged
from .row_attention import row_attention
from .tree_attention import available_backends, tree_attention, tree_attention_reference

__all__ = [
    "available_backends",
    "commit_accepted_kv",
    "commit_accepted_kv_ragged",
    "row_attention",
    "tree_attention",
    "tree_attention_reference",
]
