"""Lua scripts of RedisStore (conversations, then durable runs). Each write is one
script, so it is atomic on the server.

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

# -- durable runs ------------------------------------------------------------------------
# Keys of one run (sharing the {hash tag} of its ref, apart from the conversation's
# keys): H run hash (epoch, header, outcome, at), L entries (list). R is the store-wide
# run index (zset: ref -> updated time). Replies are {code, number}: 'ok' or a conflict
# reason, with the epoch or entry count it concerns (-1: none).
_RUN = """
local function touch_run(now, ttl_ms, ref)
  redis.call('HSET', KEYS[1], 'at', now)
  redis.call('ZADD', KEYS[3], now, ref)
  if ttl_ms ~= '0' then
    redis.call('PEXPIRE', KEYS[1], ttl_ms)
    redis.call('PEXPIRE', KEYS[2], ttl_ms)
  end
end
local function run_checked()   -- each call fails with WRONGTYPE before any write
  redis.call('ZCARD', KEYS[3])
  local n = redis.call('LLEN', KEYS[2])
  local epoch = redis.call('HGET', KEYS[1], 'epoch')
  if not epoch then return nil, n end
  local e = tonumber(epoch)
  if not e then error('malformed epoch ' .. epoch) end
  return e, n
end
local function held(epoch)
  local current, n = run_checked()
  if not current then return {'missing', -1}, n end
  if current ~= tonumber(epoch) then return {'epoch', current}, n end
  return nil, n
end
"""

# KEYS: H L R. ARGV: header, now, ttl_ms, ref
START_RUN = (
    _RUN
    + """
local current = run_checked()
if current then return {'exists', current} end
redis.call('DEL', KEYS[2])  -- entries that outlived their run's hash by a moment
redis.call('HSET', KEYS[1], 'epoch', 1, 'header', ARGV[1])
touch_run(ARGV[2], ARGV[3], ARGV[4])
return {'ok', 1}
"""
)

# KEYS: H L R. ARGV: epoch, seq, entry, now, ttl_ms, ref
APPEND_RUN = (
    _RUN
    + """
local bad, n = held(ARGV[1])
if bad then return bad end
if redis.call('HEXISTS', KEYS[1], 'outcome') == 1 then return {'finished', -1} end
local seq = tonumber(ARGV[2])
if seq < n and redis.call('LINDEX', KEYS[2], seq) == ARGV[3] then return {'ok', n} end
if seq ~= n then return {'sequence', n} end
redis.call('RPUSH', KEYS[2], ARGV[3])
touch_run(ARGV[4], ARGV[5], ARGV[6])
return {'ok', n + 1}
"""
)

# KEYS: H L R. ARGV: epoch, now, ttl_ms, ref
CLAIM_RUN = (
    _RUN
    + """
local bad = held(ARGV[1])
if bad then return bad end
local epoch = tonumber(ARGV[1]) + 1
redis.call('HSET', KEYS[1], 'epoch', epoch)
touch_run(ARGV[2], ARGV[3], ARGV[4])
return {'ok', epoch}
"""
)

# KEYS: H L R. ARGV: epoch, outcome, drop ('1' | '0'), now, ttl_ms, ref
FINISH_RUN = (
    _RUN
    + """
local bad = held(ARGV[1])
if bad then return bad end
redis.call('HSET', KEYS[1], 'outcome', ARGV[2])
if ARGV[3] == '1' then redis.call('DEL', KEYS[2]) end
touch_run(ARGV[4], ARGV[5], ARGV[6])
return {'ok', tonumber(ARGV[1])}
"""
)

# KEYS: H L R. ARGV: ref, cutoff -> 1 removed | 0 kept (written again since listed)
PRUNE_RUN = """
local at = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not at or tonumber(at) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""

# Cached values by key, all in one reply: KEYS are the values' keys. One msgpack array
# (a value's bytes, or false when absent) parses in C, where MGET's reply of n bulk
# strings costs redis-py ~12 us each in Python.
GET_CACHED = """
local out = {}
for i, key in ipairs(KEYS) do
    out[i] = redis.call('GET', key)
end
return cmsgpack.pack(out)
"""
