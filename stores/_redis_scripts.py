"""Lua scripts of RedisStore. Each write is one script, so it is atomic on the server.

Every script reads and checks before its first write: Redis does not roll a script
back, so a wrong-typed key must fail the script before anything has changed.

Keys of one conversation (all share a {hash tag}): M messages (list of msgpack
envelopes), B batch ids (zset: id -> first position), H meta (hash: rev, at, scope),
E errors (list). X is the store-wide index (zset: ref -> updated time).
"""

from __future__ import annotations

# Shared tail: bump the index and refresh the TTL of every key of the conversation.
_TOUCH = """
local function touch(now, ttl_ms, ref, scope)
  redis.call('HSET', KEYS[3], 'at', now, 'scope', scope)
  redis.call('ZADD', KEYS[5], now, ref)
  if ttl_ms ~= '0' then
    for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl_ms) end
  end
end
local function revision()
  local rev = redis.call('HGET', KEYS[3], 'rev')
  if not rev then return 0 end
  local n = tonumber(rev)
  if not n then error('malformed revision ' .. rev) end
  return n
end
local function checked()
  redis.call('ZCARD', KEYS[5])   -- each call fails with WRONGTYPE before any write
  redis.call('ZCARD', KEYS[2])
  redis.call('LLEN', KEYS[4])
  return redis.call('LLEN', KEYS[1])
end
"""

# KEYS: M B H E X. ARGV: batch_id, expected ('' = none), now, ttl_ms ('0' = none),
# cap, ref, scope, payload...  -> {0, first} written | {1, first} duplicate | {2, len}
APPEND = (
    _TOUCH
    + """
local first = redis.call('ZSCORE', KEYS[2], ARGV[1])
if first then return {1, tonumber(first)} end
local len = checked()
local rev = revision()
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= len then return {2, len} end
for i = 8, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('ZADD', KEYS[2], len, ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[5]) + 1))
redis.call('HSET', KEYS[3], 'rev', rev + 1)
touch(ARGV[3], ARGV[4], ARGV[6], ARGV[7])
return {0, len}
"""
)

# KEYS: M B H E X. ARGV: now, ttl_ms, cap, ref, scope, record
RECORD_ERROR = (
    _TOUCH
    + """
checked()
revision()
redis.call('RPUSH', KEYS[4], ARGV[6])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[3]), -1)
touch(ARGV[1], ARGV[2], ARGV[4], ARGV[5])
return 0
"""
)

# KEYS: M B H E X. ARGV: revision, count, now, ttl_ms, ref, scope, payload (reversed)...
# -> 1 committed | 0 conflict | {-1, len} count out of range
REPLACE_PREFIX = (
    _TOUCH
    + """
local len = checked()
local rev = revision()
if rev ~= tonumber(ARGV[1]) then return 0 end
local count = tonumber(ARGV[2])
if count > len then return {-1, len} end
if count > 0 then redis.call('LTRIM', KEYS[1], count, -1) end
for i = 7, #ARGV, 1000 do
  redis.call('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
local delta = (#ARGV - 6) - count
local ids = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #ids, 2 do
  local first = tonumber(ids[i + 1])
  redis.call('ZADD', KEYS[2], first >= count and first + delta or 0, ids[i])
end
redis.call('HSET', KEYS[3], 'rev', rev + 1)
touch(ARGV[3], ARGV[4], ARGV[5], ARGV[6])
return 1
"""
)

# KEYS: M B H E X. ARGV: ref, cutoff -> 1 removed | 0 kept (written again since listed)
PRUNE = """
local at = redis.call('ZSCORE', KEYS[5], ARGV[1])
if not at or tonumber(at) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
"""
