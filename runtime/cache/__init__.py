"""The response cache (`raygent.ResponseCache`): model replies kept in a store by what
their requests send, so that nothing identical is paid twice.

What lives where:
- `_cache`: `ResponseCache` (the options, the process's side: its store, its single
  flights) and `CachedAccess`, the `ModelAccess` wrapper a trip sends through when its
  run has a cache (`raygent.agents._trip`);
- `_key`: the request key (provider, endpoint, model, body less the stream fields);
- `_entry`: what is stored of a reply (the reply, and a stream's chunks) and how a hit
  plays it back.

The cache sits at the model-access layer, above the backend's own access (the local
bounds or a Ray lease), so a hit costs no slot of a provider bound and no HTTP, on both
backends. It may import the base, the seams (the `ModelAccess` it wraps) and the stores
(the `CacheStore` capability it keeps replies in).
"""

from ._cache import CachedAccess, ResponseCache
from ._key import request_key

__all__ = ["CachedAccess", "ResponseCache", "request_key"]
