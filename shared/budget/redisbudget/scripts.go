package redisbudget

import "github.com/redis/go-redis/v9"

// The scripts run budget.Memory's algorithm step for step in Redis, with
// Redis TIME as the clock. Per tenant, three keys in one hash slot:
//
//	KEYS[1] windows       hash: tw tu (minute window, used), qp qw qu
//	                      (quota period kind 0/1/2, window, used); money
//	                      (micro-units): tm (spent in minute tw), dw dm
//	                      and mw mm (day and month window, spent)
//	KEYS[2] records       hash: request id → "L|granted|tw|qp|qw|lease µs|
//	                      money granted|mtw|mdw|mmw" (a live reservation;
//	                      m*w the spend windows charged, -1 none) or
//	                      "X|..." (its expiry record). A record of six
//	                      fields (written before spend limits) has none.
//	KEYS[3] deadlines     zset: request id → lease end (live) or end of the
//	                      expiry record, µs
//
// ARGV[1] is "" (use Redis TIME) or a Unix time in µs: a test seam so the
// conformance tests can cross minutes, days and months without waiting.
//
// Numbers: Lua numbers are doubles, exact for integers below 2^53. Unix µs
// (~1.8e15), token counts (capped at 2^53 in Go) and window indexes stay
// below it; floor(a/b) of such integers is exact. Numbers are written with
// %.0f so no digits are lost to Lua's %.14g tostring.
//
// Every key the scripts touch is in KEYS, so Redis Cluster routes them.
// redis.replicate_commands lets Redis < 5 write after the non-deterministic
// TIME; Redis >= 5 does this by default and the call is a no-op.
const prelude = `
if redis.replicate_commands then redis.replicate_commands() end
local KW, KR, KD = KEYS[1], KEYS[2], KEYS[3]
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local sec = math.floor(now / 1000000)
local floor = math.floor
local function f(n) return string.format('%.0f', n) end

-- UTC calendar: H. Hinnant's civil_from_days and days_from_civil.
local function civil(z)
  z = z + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end
local function first(y, m) -- days from the epoch to y-m-01
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + floor((153 * mp + 2) / 5)
  return era * 146097 + doe - 719468
end
-- widx: the index of the window of kind p (0 minute, 1 day, 2 month) that
-- holds now; wend: when window idx of kind p ends, Unix seconds.
local function widx(p)
  if p == 1 then return floor(sec / 86400) end
  if p == 2 then
    local y, m = civil(floor(sec / 86400))
    return y * 12 + m - 1
  end
  return floor(sec / 60)
end
local function wend(idx, p)
  if p == 1 then return (idx + 1) * 86400 end
  if p == 2 then
    local y = floor((idx + 1) / 12)
    return first(y, idx + 1 - y * 12 + 1) * 86400
  end
  return (idx + 1) * 60
end

local w = redis.call('HMGET', KW, 'tw', 'tu', 'qp', 'qw', 'qu', 'tm', 'dw', 'dm', 'mw', 'mm')
-- nocounter: the tenant has no windows hash (never seen, or the store lost
-- its data: the hash outlives every record, see save).
local nocounter = not w[1]
local tw, tu = tonumber(w[1]) or -1, tonumber(w[2]) or 0
local qp, qw, qu = tonumber(w[3]) or 0, tonumber(w[4]) or -1, tonumber(w[5]) or 0
local tm, dw, dm, mw, mm = tonumber(w[6]) or 0, tonumber(w[7]) or -1, tonumber(w[8]) or 0, tonumber(w[9]) or -1, tonumber(w[10]) or 0
local dirty, rolled = false, false

-- roll: move to the windows holding now, never back; a reservation with a
-- quota of another period restarts the quota window. The spend windows
-- (day, month) are kept once a spend limit has used them.
local function roll(p, quota, spend)
  local c = math.max(widx(0), tw)
  if c ~= tw then tw, tu, tm, dirty, rolled = c, 0, 0, true, true end
  if quota and p ~= qp then qp, qw, qu, dirty, rolled = p, widx(p), 0, true, true end
  if qp ~= 0 then
    c = math.max(widx(qp), qw)
    if c ~= qw then qw, qu, dirty, rolled = c, 0, true, true end
  end
  if spend or dw >= 0 then
    c = math.max(widx(1), dw)
    if c ~= dw then dw, dm, dirty, rolled = c, 0, true, true end
    c = math.max(widx(2), mw)
    if c ~= mw then mw, mm, dirty, rolled = c, 0, true, true end
  end
end

-- dec reads a record: state, granted, tw, qp, qw, lease, then the money
-- fields (mg, mtw, mdw, mmw; 0 and -1 for a record written before them).
local function dec(v)
  local st, g, a, b, c, l, mg, x, y, z = string.match(v, '^(%a)|(%-?%d+)|(%-?%d+)|(%d+)|(%-?%d+)|(%d+)|(%d+)|(%-?%d+)|(%-?%d+)|(%-?%d+)$')
  if not st then
    st, g, a, b, c, l = string.match(v, '^(%a)|(%-?%d+)|(%-?%d+)|(%d+)|(%-?%d+)|(%d+)$')
    mg, x, y, z = 0, -1, -1, -1
  end
  return st, tonumber(g), tonumber(a), tonumber(b), tonumber(c), tonumber(l), tonumber(mg), tonumber(x), tonumber(y), tonumber(z)
end
local function enc(st, g, a, b, c, l, mg, x, y, z)
  return st .. '|' .. f(g) .. '|' .. f(a) .. '|' .. f(b) .. '|' .. f(c) .. '|' .. f(l) .. '|' .. f(mg) .. '|' .. f(x) .. '|' .. f(y) .. '|' .. f(z)
end

-- applyTo: used plus delta for a record charged to window rw (-1: none)
-- of a counter whose window is cur, by apply's rule.
local function applyTo(used, rw, cur, delta)
  if rw < 0 then return used end
  if rw == cur then
    dirty = true
    return math.max(0, used + delta)
  end
  if delta > 0 then
    dirty = true
    return used + delta
  end
  return used
end

-- apply: add delta (a refund when negative) for a record's windows: into
-- the window it was charged to while that is current; else a refund is
-- dropped and a charge goes to the current window.
local function apply(delta, rtw, rqp, rqw)
  if delta == 0 then return end
  tu = applyTo(tu, rtw, tw, delta)
  if rqw >= 0 and qp ~= 0 then
    if rqp == qp and rqw == qw then
      qu = math.max(0, qu + delta)
      dirty = true
    elseif delta > 0 then
      qu = qu + delta
      dirty = true
    end
  end
end

-- sweep: a live reservation past its lease keeps its tokens charged (a
-- request never settled may have used them all) and becomes an expiry
-- record until one more lease has passed (counted from the lease end, not
-- from this sweep, so the records' TTL always covers it); an expiry record
-- past its end goes.
local function sweep()
  local due = redis.call('ZRANGEBYSCORE', KD, '-inf', f(now), 'WITHSCORES', 'LIMIT', 0, 1000)
  for i = 1, #due, 2 do
    local id = due[i]
    local v = redis.call('HGET', KR, id)
    local st, g, a, b, c, l, mg, x, y, z
    if v then st, g, a, b, c, l, mg, x, y, z = dec(v) end
    if st == 'L' then
      redis.call('HSET', KR, id, enc('X', g, a, b, c, l, mg, x, y, z))
      redis.call('ZADD', KD, f(tonumber(due[i + 1]) + l), id)
    else
      redis.call('HDEL', KR, id)
      redis.call('ZREM', KD, id)
    end
  end
end

-- save writes the windows back; they live until the later window ends
-- (an absolute time that changes only when a window rolls).
-- The windows hash lives until its windows end, and at least as long as
-- the records (PTTL of KR), so that a settle finding neither is one the
-- store lost (nocounter), not one that outlived its tenant's windows.
local function save()
  if not dirty then return end
  redis.call('HSET', KW, 'tw', f(tw), 'tu', f(tu), 'qp', f(qp), 'qw', f(qw), 'qu', f(qu),
    'tm', f(tm), 'dw', f(dw), 'dm', f(dm), 'mw', f(mw), 'mm', f(mm))
  if not rolled then return end
  local e = wend(tw, 0)
  if qp ~= 0 then e = math.max(e, wend(qw, qp)) end
  if mw >= 0 then e = math.max(e, wend(mw, 2)) end
  redis.call('PEXPIRE', KW, math.max(math.max(0, e * 1000 - floor(now / 1000)) + 60000, redis.call('PTTL', KR)))
end
`

// reserveScript: ARGV now, id, min, want, tokens per minute, quota, period
// (0 none, 1 day, 2 month), lease µs, money min, money want, spend per
// minute, per day, per month. Returns {status, granted, refused by (a
// budget.Limit), tpm used, quota used, tpm reset s, quota reset s, money
// granted, minute spent, day spent, month spent, day reset s, month reset
// s}; status 0 refused, 1 reserved, 2 held (live), 3 held (expired).
var reserveScript = redis.NewScript(prelude + `
local id = ARGV[2]
local mn, want = tonumber(ARGV[3]), tonumber(ARGV[4])
local tpm, quota, p, lease = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local mmin, mwant = tonumber(ARGV[9]), tonumber(ARGV[10])
local spm, spd, spM = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local spend = spm > 0 or spd > 0 or spM > 0
roll(p, quota > 0, spend)
sweep()
local function reply(status, g, by, mg)
  save()
  local qe, de, me = 0, 0, 0
  if qp ~= 0 then qe = wend(qw, qp) end
  if dw >= 0 then de, me = wend(dw, 1), wend(mw, 2) end
  return {status, g, by, tu, qu, wend(tw, 0), qe, mg, tm, dm, mm, de, me}
end
local v = redis.call('HGET', KR, id)
if v then
  local st, g, _, _, _, _, mg = dec(v)
  if st == 'L' then return reply(2, g, 0, mg) end
  return reply(3, 0, 0, 0)
end
local function left(limit, used)
  if limit > 0 then return limit - used end
  return math.huge
end
local tl, ql = left(tpm, tu), left(quota, qu)
local ml, dl, Ml = left(spm, tm), left(spd, dm), left(spM, mm)
if ql < mn then return reply(0, 0, 2, 0) end
if Ml < mmin then return reply(0, 0, 5, 0) end
if dl < mmin then return reply(0, 0, 4, 0) end
if ml < mmin then return reply(0, 0, 3, 0) end
if tl < mn then return reply(0, 0, 1, 0) end
local g = math.min(want, tl, ql)
local mg = 0
if spend then mg = math.min(mwant, ml, dl, Ml) end
local rtw, rqp, rqw, x, y, z = -1, 0, -1, -1, -1, -1
if tpm > 0 then
  tu = tu + g
  rtw = tw
  dirty = true
end
if quota > 0 then
  qu = qu + g
  rqp, rqw = qp, qw
  dirty = true
end
if spm > 0 then tm, x, dirty = tm + mg, tw, true end
if spd > 0 then dm, y, dirty = dm + mg, dw, true end
if spM > 0 then mm, z, dirty = mm + mg, mw, true end
redis.call('HSET', KR, id, enc('L', g, rtw, rqp, rqw, lease, mg, x, y, z))
redis.call('ZADD', KD, f(now + lease), id)
-- Records outlive every deadline they hold (an expiry record ends at most
-- two leases after its reservation) and every window they may still refund
-- into, so a reservation never settled always returns its tokens. The
-- expiry is max(now + 2 leases, end of the windows) + 1 minute: it only
-- grows from one reservation to the next (unless the lease or the quota
-- period is changed), so it is set without reading the old one.
local ttl = 2 * math.ceil(lease / 1000)
ttl = math.max(ttl, wend(tw, 0) * 1000 - floor(now / 1000))
if qp ~= 0 then ttl = math.max(ttl, wend(qw, qp) * 1000 - floor(now / 1000)) end
if z >= 0 or y >= 0 then ttl = math.max(ttl, wend(mw, 2) * 1000 - floor(now / 1000)) end
ttl = ttl + 60000
redis.call('PEXPIRE', KR, ttl)
redis.call('PEXPIRE', KD, ttl)
save()
if redis.call('PTTL', KW) < ttl then redis.call('PEXPIRE', KW, ttl) end
return reply(1, g, 0, mg)
`)

// settleScript: ARGV now, id, actual tokens, actual money (each -1: what
// was reserved). Returns {0} for no record ({0, 1} when the tenant had no
// windows hash either: the store lost its data), else {1 live or 2
// expired, reserved, actual, money reserved, money actual}.
var settleScript = redis.NewScript(prelude + `
local id = ARGV[2]
roll(0, false, false)
sweep()
local v = redis.call('HGET', KR, id)
if not v then
  save()
  if nocounter then return {0, 1} end
  return {0}
end
local st, g, a, b, c, _, mg, x, y, z = dec(v)
local actual, money = tonumber(ARGV[3]), tonumber(ARGV[4])
if actual < 0 then actual = g end
if money < 0 then money = mg end
apply(actual - g, a, b, c)
local md = money - mg
if md ~= 0 then
  tm = applyTo(tm, x, tw, md)
  dm = applyTo(dm, y, dw, md)
  mm = applyTo(mm, z, mw, md)
end
redis.call('HDEL', KR, id)
redis.call('ZREM', KD, id)
save()
local status = 1
if st == 'X' then status = 2 end
return {status, g, actual, mg, money}
`)
