"""The Lua scripts behind approvals (``bot.store.approvals`` runs them).

Each script touches one approval's hash, and with it at most the audit outbox of the
same thread (one hash tag: one Redis Cluster slot), or one bucket of a workspace-wide
index (``bot.store.approval_index``). The fields that change are plain hash fields, so
the deciding script reads and writes strings only; ``data`` is decoded once, to complete
the decision's audit entry with what only the record knows.
"""

# KEYS[1] a ZSET of index members. ARGV: now, limit. Removes and returns the members due.
TAKE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
return due
"""

# KEYS[1] a ZSET of index members. ARGV: due by, offer again at, limit. Returns the members
# due and pushes them to ``offer again at`` (each taken by one caller at a time).
TAKE_FOR = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], member)
end
return due
"""

# KEYS[1] approval hash, KEYS[2] the thread's audit outbox. ARGV: args_hash, expires_at,
# data, ttl seconds, card ts ('' = none), the audit entry, the outbox's ttl.
# Returns 1 if created (and its audit entry staged), else the existing hash as a flat
# field/value list.
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGETALL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'status', 'pending', 'args_hash', ARGV[1],
           'expires_at', ARGV[2], 'data', ARGV[3])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'card_ts', ARGV[5])
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('RPUSH', KEYS[2], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[7])
return 1
"""

# KEYS[1] approval hash, KEYS[2] the thread's audit outbox. ARGV: outcome, decided_by
# ('' = none), args_hash ('' = any), now, the audit entry's JSON without its closing brace,
# the outbox's ttl, touch a decided record ('1' when replication is asked for). A won
# decision stages its audit entry, completed with what only the record knows (the tool,
# the arguments hash, the card, who approved first when two approvers were needed), in
# the same script.
# ARGV[8]: the edited arguments (JSON) an approval with edits decides with ('' = none);
# ARGV[9]: the edit the decider saw (its tag, '' = none; '*' = not checked): a card edited
# since is 'changed', never approved unseen.
# Returns {verdict, field, value, ...}; verdict is won | decided | expired | stale | early |
# changed, or {'missing'} when there is no record.
DECIDE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing'}
end
local outcome, by, want, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local verdict = 'won'
local expires_at = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))
local current = redis.call('HGET', KEYS[1], 'status')
local shown = redis.call('HGET', KEYS[1], 'edited_args')
local tag = ''
if shown then tag = string.sub(redis.sha1hex(shown), 1, 12) end
if current ~= 'pending' then
  verdict = 'decided'
  if ARGV[7] == '1' then  -- replication asked for: the WAIT behind must cover the decision
    redis.call('HSET', KEYS[1], 'status', current)
  end
elseif (outcome == 'approved' or outcome == 'denied') and now >= expires_at then
  verdict = 'expired'
elseif want ~= '' and want ~= redis.call('HGET', KEYS[1], 'args_hash') then
  verdict = 'stale'
elseif outcome == 'expired' and now < expires_at then
  verdict = 'early'
elseif ARGV[9] ~= '*' and ARGV[9] ~= tag and outcome ~= 'expired' then
  verdict = 'changed'
else
  -- The entry first: a script that fails half-way is not rolled back, so every read
  -- that could fail comes before the first write.
  local data = cjson.decode(redis.call('HGET', KEYS[1], 'data'))
  local card = redis.call('HGET', KEYS[1], 'card_ts')
  if not card or string.sub(card, 1, 8) == 'posting:' then card = '' end
  local first = redis.call('HGET', KEYS[1], 'first_approver')
  local entry = ARGV[5] .. ',"tool":' .. cjson.encode(data['tool'])
    .. ',"args_hash":' .. cjson.encode(redis.call('HGET', KEYS[1], 'args_hash'))
    .. ',"detail":{"card_ts":' .. cjson.encode(card)
    .. ',"requester":' .. cjson.encode(data['requester'])
  if first then
    entry = entry .. ',"first_approver":' .. cjson.encode(first)
  end
  local approved = shown
  if outcome == 'approved' and ARGV[8] ~= '' then
    approved = ARGV[8]
    redis.call('HSET', KEYS[1], 'edited_args', ARGV[8], 'edited_by', by)
  end
  if outcome == 'approved' and approved then
    local editor = redis.call('HGET', KEYS[1], 'edited_by') or by
    entry = entry .. ',"edited_by":' .. cjson.encode(editor) .. '},"arguments":' .. approved .. '}'
  else
    entry = entry .. '}}'
  end
  redis.call('HSET', KEYS[1], 'status', outcome, 'decided_at', ARGV[4], 'card_owed', '1')
  if by ~= '' then
    redis.call('HSET', KEYS[1], 'decided_by', by)
  end
  redis.call('RPUSH', KEYS[2], entry)
  redis.call('EXPIRE', KEYS[2], ARGV[6])
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, verdict)
return out
"""

# KEYS[1] approval hash. ARGV: marker ("posting:<epoch>"), now, stale after (s).
# Returns 1 if the caller may post the card now: no card yet and nobody posting it, or a
# poster that went quiet for longer than ``stale after`` (it died between claim and post).
CLAIM_CARD = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'pending' then return 0 end
local card = redis.call('HGET', KEYS[1], 'card_ts')
if card then
  if string.sub(card, 1, 8) ~= 'posting:' then return 0 end
  if tonumber(ARGV[2]) - tonumber(string.sub(card, 9)) < tonumber(ARGV[3]) then return 0 end
end
redis.call('HSET', KEYS[1], 'card_ts', ARGV[1])
return 1
"""

# KEYS[1] approval hash. ARGV: field, value, how: 'always'; 'forward' (a count, only ever
# moved forward); 'first' (only while the field is unset and the approval pending: the
# first of two approvers is whoever was first, and never set on a decided card).
# Returns 1 if written. Never on a missing record: a late write (a card posted, a receipt
# count) must not bring back an expired record as a hash of that one field.
SET_FIELD = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local how = ARGV[3]
if how == 'forward'
    and tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') >= tonumber(ARGV[2]) then
  return 0
end
if how == 'first' and (redis.call('HGET', KEYS[1], 'status') ~= 'pending'
    or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS[1] approval hash. ARGV: the edited arguments (JSON), the editor, the edited call's
# dry run, now, the edit the editor saw (its tag, '' = none), the arguments hash the card
# was made for. A destructive call's edit: while pending and valid, the edit is stored as
# the call's first approval (the editor's), to be decided by a second person.
# Returns {verdict, field, value, ...}: verdict is won | decided | expired | stale | changed;
# {'missing'} when there is no record.
EDIT = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing'}
end
local verdict = 'won'
local shown = redis.call('HGET', KEYS[1], 'edited_args')
local tag = ''
if shown then tag = string.sub(redis.sha1hex(shown), 1, 12) end
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then
  verdict = 'decided'
elseif tonumber(ARGV[4]) >= tonumber(redis.call('HGET', KEYS[1], 'expires_at')) then
  verdict = 'expired'
elseif ARGV[6] ~= redis.call('HGET', KEYS[1], 'args_hash') then
  verdict = 'stale'
elseif ARGV[5] ~= tag then
  verdict = 'changed'
else
  redis.call('HSET', KEYS[1], 'edited_args', ARGV[1], 'edited_by', ARGV[2],
             'edited_dry_run', ARGV[3], 'first_approver', ARGV[2])
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, verdict)
return out
"""
