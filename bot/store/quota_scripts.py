"""The Lua scripts behind the workspace's quotas (``bot.store.quota`` runs them).

Every key is under the one ``{quota}`` hash tag, so each script touches one Redis Cluster
slot. The pieces several scripts share (``DAY``: a day's counters against its caps;
``RATE``: a person's sliding hour) are Lua functions the scripts are built from. A script
checks every key's type before its first write: Lua has no rollback, so a script that
fails fails before it changed anything.
"""

# What every script that needs today's caps starts with. ``day_of(key, base_t, base_c)``:
# the day hash's used_t, used_c, cap_t, cap_c (the base caps, '' = none, plus the day's
# raises; nil = no cap) and reached. ``must_be(key, kind)``: an error reply unless the key
# is absent or of that type (checked before any write: Lua has no rollback).
DAY = """
local function day_of(key, base_t, base_c)
  local f = redis.call('HMGET', key, 'tokens', 'cost', 'raised_tokens', 'raised_cost', 'refused')
  local d = {used_t = tonumber(f[1] or '0'), used_c = tonumber(f[2] or '0')}
  if base_t ~= '' then d.cap_t = tonumber(base_t) + tonumber(f[3] or '0') end
  if base_c ~= '' then d.cap_c = tonumber(base_c) + tonumber(f[4] or '0') end
  d.reached = (f[5] ~= false and f[5] ~= nil)
    or (d.cap_t ~= nil and d.used_t >= d.cap_t)
    or (d.cap_c ~= nil and d.used_c >= d.cap_c)
  return d
end
local function must_be(key, kind)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= kind then
    return redis.error_reply('WRONGTYPE ' .. key .. ' is a ' .. t .. ', not a ' .. kind)
  end
end
"""

# KEYS[1] day hash. ARGV: 1 tokens, 2 cost micro ('' unpriced), 3 token cap ('' none),
# 4 cost cap micro ('' none), 5 ttl. Returns {'ok'} or {'tokens'|'cost', used_t, cap_t,
# used_c, cap_c} (-1 for no cap); a refusal marks the day ``refused``.
RESERVE = (
    DAY
    + """
local bad = must_be(KEYS[1], 'hash')
if bad then return bad end
local t = tonumber(ARGV[1])
local d = day_of(KEYS[1], ARGV[3], ARGV[4])
local over = ''
if d.cap_t ~= nil and d.used_t + t > d.cap_t then
  over = 'tokens'
elseif d.cap_c ~= nil then
  if ARGV[2] == '' then
    if d.used_c >= d.cap_c then over = 'cost' end
  elseif d.used_c + tonumber(ARGV[2]) > d.cap_c then
    over = 'cost'
  end
end
if over ~= '' then
  redis.call('HSET', KEYS[1], 'refused', over)
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return {over, d.used_t, d.cap_t or -1, d.used_c, d.cap_c or -1}
end
redis.call('HINCRBY', KEYS[1], 'tokens', t)
if ARGV[2] ~= '' then redis.call('HINCRBY', KEYS[1], 'cost', ARGV[2]) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {'ok'}
"""
)

# KEYS[1] the hold's day hash. ARGV: 1 token delta, 2 cost delta (micro). Never below 0;
# a day whose counters expired is left alone. Returns 1, or 0 when there was no day.
SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[1]) < 0 then
  redis.call('HSET', KEYS[1], 'tokens', 0)
end
if ARGV[2] ~= '0' and redis.call('HINCRBY', KEYS[1], 'cost', ARGV[2]) < 0 then
  redis.call('HSET', KEYS[1], 'cost', 0)
end
return 1
"""

# KEYS[1] day hash, KEYS[2] (optional) an audit outbox LIST. ARGV: 1 token cap ('' none),
# 2 cost cap micro ('' none), 3 ttl, 4 by, 5 now, 6 '1': only when reached, 7 the audit
# entry, 8 the outbox's ttl. Returns {'raised'|'not_reached', field, value, …} (the day).
RAISE = (
    DAY
    + """
local bad = must_be(KEYS[1], 'hash')
if bad then return bad end
if KEYS[2] then
  bad = must_be(KEYS[2], 'list')
  if bad then return bad end
end
local d = day_of(KEYS[1], ARGV[1], ARGV[2])
local verdict = 'raised'
if ARGV[6] == '1' and not d.reached then
  verdict = 'not_reached'
else
  if ARGV[1] ~= '' then redis.call('HINCRBY', KEYS[1], 'raised_tokens', ARGV[1]) end
  if ARGV[2] ~= '' then redis.call('HINCRBY', KEYS[1], 'raised_cost', ARGV[2]) end
  redis.call('HINCRBY', KEYS[1], 'raises', 1)
  redis.call('HDEL', KEYS[1], 'refused')
  redis.call('HSET', KEYS[1], 'raised_by', ARGV[4], 'raised_at', ARGV[5])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  if KEYS[2] then
    redis.call('RPUSH', KEYS[2], ARGV[7])
    redis.call('EXPIRE', KEYS[2], ARGV[8])
  end
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, verdict)
return out
"""
)

# The rate's steps. KEYS[R] the user's ZSET. ARGV (from A): now, window, per hour, member,
# '1' to count. Sets ``rate`` to {'ok'} / {'dup'} / {'wait', retry at, jobs in window}.
RATE = """
local function rate_of(key, now, window, per_hour, member, count)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZSCORE', key, member) then return {'dup'} end
  local n = redis.call('ZCARD', key)
  if n >= per_hour then
    local first = redis.call('ZRANGE', key, n - per_hour, n - per_hour, 'WITHSCORES')
    return {'wait', tostring(tonumber(first[2]) + window), n}
  end
  if count then
    redis.call('ZADD', key, now, member)
    redis.call('ZREMRANGEBYRANK', key, 0, -(per_hour + 1))
    redis.call('EXPIRE', key, math.ceil(window) + 60)
  end
  return {'ok', n + 1}
end
"""

# KEYS[1] the user's ZSET. ARGV: 1 now, 2 window, 3 per hour, 4 member, 5 '1' to count.
ADMIT_RATE = (
    DAY
    + RATE
    + """
local bad = must_be(KEYS[1], 'zset')
if bad then return bad end
return rate_of(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4],
               ARGV[5] == '1')
"""
)

# KEYS: 1 day hash, 2 the user's ZSET, 3 the message's key. ARGV: 1 token cap ('' none),
# 2 cost cap micro ('' none), 3 now, 4 window, 5 per hour (0: no rate), 6 member, 7 the
# message key's ttl. Returns {'ok'}, {'cap', first, field, value, …} (the day) or
# {'wait', first, retry at, n}; ``first``: 1 unless this message was refused before.
ADMIT = (
    DAY
    + RATE
    + """
local bad = must_be(KEYS[1], 'hash') or must_be(KEYS[2], 'zset') or must_be(KEYS[3], 'string')
if bad then return bad end
local seen = redis.call('GET', KEYS[3])
if seen == 'ok' then return {'ok'} end
local first = 1
if seen == 'refused' then first = 0 end
if ARGV[1] ~= '' or ARGV[2] ~= '' then
  local d = day_of(KEYS[1], ARGV[1], ARGV[2])
  if d.reached then
    redis.call('SET', KEYS[3], 'refused', 'EX', ARGV[7])
    local out = redis.call('HGETALL', KEYS[1])
    table.insert(out, 1, first)
    table.insert(out, 1, 'cap')
    return out
  end
end
if tonumber(ARGV[5]) > 0 then
  local r = rate_of(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
                    ARGV[6], true)
  if r[1] == 'wait' then
    redis.call('SET', KEYS[3], 'refused', 'EX', ARGV[7])
    return {'wait', first, r[2], r[3]}
  end
end
redis.call('SET', KEYS[3], 'ok', 'EX', ARGV[7])
return {'ok'}
"""
)
