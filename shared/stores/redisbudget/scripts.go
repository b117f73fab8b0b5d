package redisbudget

import "github.com/redis/go-redis/v9"

// The scripts run budget.Memory's algorithm step for step in Redis, with
// Redis TIME as the clock. Per tenant, three keys in one hash slot:
//
//	KEYS[1] windows       hash: tw tu (minute window, used), qp qw qu
//	                      (quota period kind 0/1/2, window, used); money
//	                      (micro-units): tm (spent in minute tw), dw dm
//	                      and mw mm (day and month window, spent); c
//	                      when the hash was made (µs; 0 before c was
//	                      written): a record missing from a hash made
//	                      after its reservation was lost with the data
//	KEYS[2] records       hash: request id → "L|granted|tw|qp|qw|lease µs|
//	                      money granted|mtw|mdw|mmw" (a live reservation;
//	                      m*w the spend windows charged, -1 none),
//	                      "X|..." (its expiry record) or "T|..." (a
//	                      tombstone: a settle found no record, so a late
//	                      reservation of the id reserves nothing). A
//	                      record of six fields (written before spend
//	                      limits) has none.
//	KEYS[3] deadlines     zset: request id → lease end (live) or end of the
//	                      expiry record or tombstone, µs
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
local KW, KR, KD
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

-- An account is three keys (KEYS[3i-2..3i]): the tenant's first, then
-- its levels'. open(i) loads account i's windows into the variables the
-- functions below work on; save writes them back.
local nocounter, tw, tu, qp, qw, qu, tm, dw, dm, mw, mm, cr
local dirty, rolled
local function open(i)
  KW, KR, KD = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local w = redis.call('HMGET', KW, 'tw', 'tu', 'qp', 'qw', 'qu', 'tm', 'dw', 'dm', 'mw', 'mm', 'c')
  -- nocounter: the account has no windows hash (never seen, or the store
  -- lost its data: the hash outlives every record, see save).
  nocounter = not w[1]
  tw, tu = tonumber(w[1]) or -1, tonumber(w[2]) or 0
  qp, qw, qu = tonumber(w[3]) or 0, tonumber(w[4]) or -1, tonumber(w[5]) or 0
  tm, dw, dm, mw, mm = tonumber(w[6]) or 0, tonumber(w[7]) or -1, tonumber(w[8]) or 0, tonumber(w[9]) or -1, tonumber(w[10]) or 0
  cr = tonumber(w[11]) or 0
  if nocounter then cr = now end
  dirty, rolled = false, false
end

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
    'tm', f(tm), 'dw', f(dw), 'dm', f(dm), 'mw', f(mw), 'mm', f(mm), 'c', f(cr))
  if not rolled then return end
  local e = wend(tw, 0)
  if qp ~= 0 then e = math.max(e, wend(qw, qp)) end
  if mw >= 0 then e = math.max(e, wend(mw, 2)) end
  redis.call('PEXPIRE', KW, math.max(math.max(0, e * 1000 - floor(now / 1000)) + 60000, redis.call('PTTL', KR)))
end
`

// reserveScript: KEYS the accounts (the tenant's, then its levels'); ARGV
// now, id, min, want, lease µs, money min, money want, then per account
// tokens per minute, quota, period (0 none, 1 day, 2 month), spend per
// minute, per day, per month. The request passes only if every account
// has room; the grant is the least any has left, charged to each, each
// keeping its own record of id. Returns {status, granted, refused by (a
// budget.Limit), refusing account (0 the tenant), money granted, now
// µs}, then per account {tpm used, quota used, tpm reset s, quota reset
// s, minute spent, day spent, month spent, day reset s, month reset s};
// status 0 refused, 1 reserved, 2 held (live), 3 held (expired), 4 held
// (a tombstone: released before it came).
var reserveScript = redis.NewScript(prelude + `
local id = ARGV[2]
local mn, want, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local mmin, mwant = tonumber(ARGV[6]), tonumber(ARGV[7])
local n = #KEYS / 3
local lim, spend = {}, false
for i = 1, n do
  local o = 7 + 6 * (i - 1)
  local l = {tpm = tonumber(ARGV[o + 1]), quota = tonumber(ARGV[o + 2]), p = tonumber(ARGV[o + 3]),
    spm = tonumber(ARGV[o + 4]), spd = tonumber(ARGV[o + 5]), spM = tonumber(ARGV[o + 6])}
  if l.quota <= 0 then l.p = 0 end
  if l.spm > 0 or l.spd > 0 or l.spM > 0 then spend = true end
  lim[i] = l
end
local function left(limit, used)
  if limit > 0 then return limit - used end
  return math.huge
end
-- rank: the longest limit refusing is named (budget.Limit.longer).
local rank = {[0] = 0, [1] = 1, [3] = 2, [4] = 3, [5] = 4, [2] = 5}
local out = {0, 0, 0, 0, 0, now}
local function report(i)
  local qe, de, me = 0, 0, 0
  if qp ~= 0 then qe = wend(qw, qp) end
  if dw >= 0 then de, me = wend(dw, 1), wend(mw, 2) end
  local o = 6 + 9 * (i - 1)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = tu, qu, wend(tw, 0), qe
  out[o + 5], out[o + 6], out[o + 7], out[o + 8], out[o + 9] = tm, dm, mm, de, me
end
local g, mg, by, at, held = want, mwant, 0, 0, nil
for i = 1, n do
  local l = lim[i]
  open(i)
  roll(l.p, l.quota > 0, spend)
  sweep()
  if i == 1 then
    local v = redis.call('HGET', KR, id)
    if v then
      local st, rg, _, _, _, _, rmg = dec(v)
      if st == 'L' then held = {2, rg, rmg} elseif st == 'T' then held = {4, 0, 0} else held = {3, 0, 0} end
    end
  end
  local tl, ql = left(l.tpm, tu), left(l.quota, qu)
  local ml, dl, Ml = left(l.spm, tm), left(l.spd, dm), left(l.spM, mm)
  g, mg = math.min(g, tl, ql), math.min(mg, ml, dl, Ml)
  local b = 0
  if ql < mn then b = 2
  elseif Ml < mmin then b = 5
  elseif dl < mmin then b = 4
  elseif ml < mmin then b = 3
  elseif tl < mn then b = 1 end
  if rank[b] > rank[by] then by, at = b, i - 1 end
  save()
  report(i)
end
if held then
  out[1], out[2], out[5] = held[1], held[2], held[3]
  return out
end
if by ~= 0 then
  out[3], out[4] = by, at
  return out
end
if not spend then mg = 0 end
for i = 1, n do
  local l = lim[i]
  open(i)
  local rtw, rqp, rqw, x, y, z = -1, 0, -1, -1, -1, -1
  if l.tpm > 0 then tu, rtw, dirty = tu + g, tw, true end
  if l.quota > 0 then qu, rqp, rqw, dirty = qu + g, qp, qw, true end
  if l.spm > 0 then tm, x, dirty = tm + mg, tw, true end
  if l.spd > 0 then dm, y, dirty = dm + mg, dw, true end
  if l.spM > 0 then mm, z, dirty = mm + mg, mw, true end
  redis.call('HSET', KR, id, enc('L', g, rtw, rqp, rqw, lease, mg, x, y, z))
  redis.call('ZADD', KD, f(now + lease), id)
  -- Records outlive every deadline they hold (an expiry record ends at
  -- most two leases after its reservation) and every window they may
  -- still refund into, so a reservation never settled always returns its
  -- tokens. The expiry is max(now + 2 leases, end of the windows) + 1
  -- minute: it only grows from one reservation to the next (unless the
  -- lease or the quota period is changed), so it is set without reading
  -- the old one.
  local ttl = 2 * math.ceil(lease / 1000)
  ttl = math.max(ttl, wend(tw, 0) * 1000 - floor(now / 1000))
  if qp ~= 0 then ttl = math.max(ttl, wend(qw, qp) * 1000 - floor(now / 1000)) end
  if z >= 0 or y >= 0 then ttl = math.max(ttl, wend(mw, 2) * 1000 - floor(now / 1000)) end
  ttl = ttl + 60000
  redis.call('PEXPIRE', KR, ttl)
  redis.call('PEXPIRE', KD, ttl)
  save()
  if redis.call('PTTL', KW) < ttl then redis.call('PEXPIRE', KW, ttl) end
  report(i)
end
out[1], out[2], out[5] = 1, g, mg
return out
`)

// settleScript: KEYS the accounts (the tenant's, then its levels'); ARGV
// now, id, actual tokens, actual money (each -1: what was reserved),
// reserved at µs (0 unknown), lease µs (0: no tombstone). Every
// account's record of id is settled; the reply is the tenant's: {0} for
// no record ({0, 1} when the tenant had no windows hash either: the
// store lost its data; {0, 0, 1} when the hash was made after the
// reservation, within two leases of it: lost too), else {1 live or 2
// expired, reserved, actual, money reserved, money actual}. No record
// (and no tombstone) leaves a tombstone of id in the tenant's records
// for the lease.
var settleScript = redis.NewScript(prelude + `
local id = ARGV[2]
local rat, lease = tonumber(ARGV[5]), tonumber(ARGV[6])
local out = {0}
local tomb = 0
for i = 1, #KEYS / 3 do
  open(i)
  roll(0, false, false)
  sweep()
  local v = redis.call('HGET', KR, id)
  if v and string.sub(v, 1, 1) == 'T' then
    -- released already: nothing to settle, the tombstone stays
  elseif not v then
    if i == 1 then
      if nocounter then out = {0, 1}
      elseif rat > 0 and lease > 0 and cr > rat and now < rat + 2 * lease then out = {0, 0, 1} end
      if lease > 0 then
        redis.call('HSET', KR, id, enc('T', 0, -1, 0, -1, lease, 0, -1, -1, -1))
        redis.call('ZADD', KD, f(now + lease), id)
        tomb = math.ceil(lease / 1000) + 60000
        if redis.call('PTTL', KR) < tomb then
          redis.call('PEXPIRE', KR, tomb)
          redis.call('PEXPIRE', KD, tomb)
        end
      end
    end
  else
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
    if i == 1 then
      local status = 1
      if st == 'X' then status = 2 end
      out = {status, g, actual, mg, money}
    end
  end
  save()
  if i == 1 and tomb > 0 and redis.call('PTTL', KW) < tomb then redis.call('PEXPIRE', KW, tomb) end
end
return out
`)
