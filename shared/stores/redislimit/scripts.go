package redislimit

import "github.com/redis/go-redis/v9"

// The scripts keep a bucket as a hash: st (start, Unix µs of Redis TIME), mx
// (max tokens), iv (interval, µs), av (available tokens), lt (last tick).
//
// Numbers: Lua numbers are doubles, exact for integers below 2^53. Unix
// microseconds (~1.7e15), intervals in ns (iv*1000, exact below 104 days)
// and token counts (capped at 2^53 in Go) stay below it, and floor(a/b) of
// such integers is exact because a/b is correctly rounded and its distance
// to the next integer (>= 1/b) exceeds half an ulp while a < 2^53. Numbers
// are written back with %.0f so no digits are lost to Lua's %.14g tostring.
//
// redis.replicate_commands lets Redis < 5 write after the non-deterministic
// TIME; Redis >= 5 does this by default and the call is a no-op.

// takeScript: KEYS[1] bucket; ARGV tokens, interval µs, ttl ms (the shape of
// a new bucket). Returns {max, remaining, reset µs, ok}. It is memorystore's
// bucket.take with Redis TIME as the clock.
var takeScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local function f(n) return string.format('%.0f', n) end
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local b = redis.call('HMGET', key, 'st', 'mx', 'iv', 'av', 'lt')
local st, mx, iv, av, lt
local fresh = not b[1]
if fresh then
  st, mx, iv, av, lt = now, tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[1]), 0
else
  st, mx, iv, av, lt = tonumber(b[1]), tonumber(b[2]), tonumber(b[3]), tonumber(b[4]), tonumber(b[5])
end
local el = now - st
if el < 0 then el = 0 end -- Redis clock stepped back (e.g. failover): stay in tick 0
local tick = math.floor(el / iv)
if lt < tick then
  local fill = math.floor((tick - lt) * ((iv * 1000) / mx))
  if fill > mx then fill = mx end
  av = fill
  lt = tick
end
local ok, rem = 0, 0
if av > 0 then
  av = av - 1
  ok, rem = 1, av
end
if fresh then
  redis.call('HSET', key, 'st', f(st), 'mx', f(mx), 'iv', f(iv), 'av', f(av), 'lt', f(lt))
else
  redis.call('HSET', key, 'av', f(av), 'lt', f(lt))
end
redis.call('PEXPIRE', key, math.max(tonumber(ARGV[3]), math.ceil(2 * iv / 1000)))
return {mx, rem, st + (tick + 1) * iv, ok}
`)

// setScript: KEYS[1] bucket; ARGV tokens, interval µs, ttl ms. Replaces the
// bucket with a full one starting now (memorystore's Set).
var setScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSET', key, 'st', string.format('%.0f', now), 'mx', ARGV[1], 'iv', ARGV[2], 'av', ARGV[1], 'lt', '0')
redis.call('PEXPIRE', key, math.max(tonumber(ARGV[3]), math.ceil(2 * tonumber(ARGV[2]) / 1000)))
return 1
`)

// burstScript: KEYS[1] bucket; ARGV tokens, interval µs, ttl ms, burst.
// Adds burst to the available tokens of an existing bucket (until its next
// tick resets it), or creates a full bucket of tokens+burst (memorystore's
// Burst).
var burstScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local iv = tonumber(ARGV[2])
if redis.call('EXISTS', key) == 1 then
  redis.call('HINCRBY', key, 'av', ARGV[4])
  iv = tonumber(redis.call('HGET', key, 'iv'))
else
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local mx = string.format('%.0f', tonumber(ARGV[1]) + tonumber(ARGV[4]))
  redis.call('HSET', key, 'st', string.format('%.0f', now), 'mx', mx, 'iv', ARGV[2], 'av', mx, 'lt', '0')
end
redis.call('PEXPIRE', key, math.max(tonumber(ARGV[3]), math.ceil(2 * iv / 1000)))
return 1
`)
