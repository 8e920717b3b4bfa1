"""The Lua scripts of the past-incident store (``bot.store.incidents`` documents the key
layout they keep). Every key they touch is under the ``{incidents}`` hash tag: the fixed
ones are declared (``KEYS``), the per-record and per-term ones are built from the prefix
``ARGV[1]`` (``keys.incidents("")``) with the same tag, so each script runs on one
Redis Cluster slot.

The shared functions (``_COMMON``) are pasted into the scripts that use them: Redis runs
each script as one unit, so a record is indexed, replaced or pruned whole.
"""

from __future__ import annotations

POSTING_HEX = 8  # a posting: the document in 6 hex digits, the term frequency in 2
LENGTH_HEX = 2  # a record's length in ``lens``: one byte, quantized, 00 when removed

# KEYS: meta, ids, time, lens, terms. ARGV[1]: the prefix.
_COMMON = r"""
local P = ARGV[1]
local DEAD = '00'

-- Removes record d (a number) from every index but the postings (they skip it from now
-- on: its length reads dead) and deletes its key.
local function remove(d)
  local b = math.floor(d / 128)
  local o = d % 128
  local xk = P .. 'x:' .. b
  local info = redis.call('HGET', xk, o)
  if info then
    local id, alert, dl = string.match(info, '^(.-)\31(.-)\31(%d+)$')
    redis.call('SETRANGE', KEYS[4], d * 2, DEAD)
    redis.call('HINCRBY', KEYS[1], 'n', -1)
    redis.call('HINCRBY', KEYS[1], 'len', -tonumber(dl))
    if alert ~= '' then
      redis.call('ZREM', P .. 'a:' .. alert, d)
    end
    if redis.call('HGET', KEYS[2], id) == tostring(d) then
      redis.call('HDEL', KEYS[2], id)
    end
    redis.call('HDEL', xk, o)
  end
  redis.call('ZREM', KEYS[3], d)
  redis.call('DEL', P .. 'r:' .. d)
end

-- Drops the postings of records below lo from the front of up to most terms' postings:
-- those where that is an eighth or more of the records they span (estimated from the
-- first record they name), so a term is rewritten once per eighth of the window, not
-- at every removal.
local function compact(lo, top, most)
  local stale = lo - (top - lo) / 7
  local terms = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', stale, 'LIMIT', 0, most)
  for _, term in ipairs(terms) do
    local key = P .. 't:' .. term
    local s = redis.call('GET', key) or ''
    local count = #s / 8
    local first, last = 0, count  -- the first posting at or above lo, by bisection
    while first < last do
      local mid = math.floor((first + last) / 2)
      if tonumber(string.sub(s, mid * 8 + 1, mid * 8 + 6), 16) < lo then
        first = mid + 1
      else
        last = mid
      end
    end
    if first >= count then
      redis.call('DEL', key)
      redis.call('ZREM', KEYS[5], term)
    else
      if first > 0 then
        redis.call('SET', key, string.sub(s, first * 8 + 1))
      end
      redis.call('ZADD', KEYS[5], tonumber(string.sub(s, first * 8 + 1, first * 8 + 6), 16), term)
    end
  end
  return #terms
end

-- Removes up to most records that started before cutoff, moves lo (the lowest record
-- that may be alive) past the dead, and compacts up to squeeze terms' postings. Returns
-- {removed, compacted}.
local function prune(cutoff, most, squeeze)
  local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. cutoff, 'LIMIT', 0, most)
  for _, d in ipairs(old) do
    remove(tonumber(d))
  end
  local lo = tonumber(redis.call('HGET', KEYS[1], 'lo') or '0')
  local top = tonumber(redis.call('HGET', KEYS[1], 'next') or '0')
  local moved = lo
  while moved < top do
    local chunk = redis.call('GETRANGE', KEYS[4], moved * 2, moved * 2 + 2 * 512 - 1)
    local at = 1
    while at <= #chunk and string.sub(chunk, at, at + 1) == DEAD do
      at = at + 2
    end
    moved = moved + (at - 1) / 2
    if at <= #chunk or #chunk == 0 then
      break
    end
  end
  moved = math.min(moved, top)
  if moved ~= lo then
    redis.call('HSET', KEYS[1], 'lo', moved)
  end
  if moved <= 0 then
    return {#old, 0}
  end
  return {#old, compact(moved, top, squeeze)}
end
"""

# KEYS: meta, ids, time, lens, terms. ARGV: prefix, id, record JSON, ttl ms, started at,
# alert name ('' for none), document length, its quantized byte (2 hex digits), prune
# cutoff, most to prune, most terms to compact, then term, tf (2 hex digits), term, tf…
# Returns {pruned, compacted}.
ADD = (
    _COMMON
    + r"""
local id = ARGV[2]
local old = redis.call('HGET', KEYS[2], id)
if old then
  remove(tonumber(old))
end
local d = redis.call('HINCRBY', KEYS[1], 'next', 1) - 1
local code = string.format('%06x', d)
for i = 12, #ARGV, 2 do
  local key = P .. 't:' .. ARGV[i]
  if redis.call('APPEND', key, code .. ARGV[i + 1]) == 8 then
    redis.call('ZADD', KEYS[5], d, ARGV[i])
  end
end
redis.call('SETRANGE', KEYS[4], d * 2, ARGV[8])
redis.call('SET', P .. 'r:' .. d, ARGV[3], 'PX', ARGV[4])
redis.call('HSET', KEYS[2], id, d)
redis.call('ZADD', KEYS[3], ARGV[5], d)
if ARGV[6] ~= '' then
  redis.call('ZADD', P .. 'a:' .. ARGV[6], ARGV[5], d)
end
local info = id .. '\31' .. ARGV[6] .. '\31' .. ARGV[7]
redis.call('HSET', P .. 'x:' .. math.floor(d / 128), d % 128, info)
redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HINCRBY', KEYS[1], 'len', ARGV[7])
return prune(ARGV[9], tonumber(ARGV[10]), tonumber(ARGV[11]))
"""
)

# KEYS: meta, ids, time, lens, terms. ARGV: prefix, cutoff, most to prune, most terms to
# compact. Returns {pruned, compacted}.
PRUNE = (
    _COMMON
    + r"""
return prune(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
"""
)

# KEYS: meta, lens, then the postings of the query's terms. Returns {N, total length,
# lo, lens from lo on, postings…}: bulk strings only, however many postings (the reply
# is parsed in Python, where every element costs).
SEARCH = r"""
local m = redis.call('HMGET', KEYS[1], 'n', 'len', 'lo')
local lo = tonumber(m[3] or '0')
local out = {m[1] or '0', m[2] or '0', tostring(lo), redis.call('GETRANGE', KEYS[2], lo * 2, -1)}
for i = 3, #KEYS do
  out[#out + 1] = redis.call('GET', KEYS[i]) or ''
end
return out
"""

# KEYS: ids. ARGV: prefix, id. Returns {doc, record JSON} or {} when there is none.
GET = r"""
local d = redis.call('HGET', KEYS[1], ARGV[2])
if not d then
  return {}
end
local raw = redis.call('GET', ARGV[1] .. 'r:' .. d)
if not raw then
  return {}
end
return {d, raw}
"""

# KEYS: a record. ARGV: the value read, the new value. Replaces it (keeping its TTL)
# only if nobody changed it since it was read: 1, else 0.
SWAP = r"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
"""
