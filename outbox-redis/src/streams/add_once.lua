-- Adds an outbox message to a stream once inside the dedup window.
-- KEYS[1]: the message id's dedup key; KEYS[2]: the stream.
-- ARGV[1]: the window in milliseconds; ARGV[2]: MAXLEN ~ (0 for none);
-- ARGV[3]: the task's identity (outbox id, task id, kind);
-- ARGV[4..]: the entry's field/value pairs.
-- Returns {added (1) or not (0), the entry id, the same task (1) or not (0)}.
local seen = redis.call('GET', KEYS[1])
if seen then
  local cut = string.find(seen, '\n', 1, true)
  if not cut then
    return {0, seen, 0}
  end
  local same = string.sub(seen, cut + 1) == ARGV[3] and 1 or 0
  return {0, string.sub(seen, 1, cut - 1), same}
end
local id
if tonumber(ARGV[2]) > 0 then
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 4))
else
  id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
end
redis.call('SET', KEYS[1], id .. '\n' .. ARGV[3], 'PX', ARGV[1])
return {1, id, 1}
