-- Adds outbox messages to one stream, each once inside the dedup window,
-- in one call for a whole batch.
-- KEYS: for each message, its message id's dedup key, then the stream.
-- ARGV[1]: the window in milliseconds; ARGV[2]: MAXLEN ~ (0 for none);
-- then for each message: the task's identity (outbox id, task id, kind),
-- the number n of its entry's field/value arguments, and those n.
-- Returns for each message {added (1) or not (0), the entry id, the same
-- task (1) or not (0)}.
local window, maxlen = ARGV[1], tonumber(ARGV[2])
local out = {}
local at = 3
for message = 1, #KEYS / 2 do
  local dedup, stream = KEYS[2 * message - 1], KEYS[2 * message]
  local identity, count = ARGV[at], tonumber(ARGV[at + 1])
  local first, last = at + 2, at + 1 + count
  at = last + 1
  local seen = redis.call('GET', dedup)
  if seen then
    local cut = string.find(seen, '\n', 1, true)
    if cut then
      local same = string.sub(seen, cut + 1) == identity and 1 or 0
      out[message] = {0, string.sub(seen, 1, cut - 1), same}
    else
      out[message] = {0, seen, 0}
    end
  else
    local id
    if maxlen > 0 then
      id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(ARGV, first, last))
    else
      id = redis.call('XADD', stream, '*', unpack(ARGV, first, last))
    end
    redis.call('SET', dedup, id .. '\n' .. identity, 'PX', window)
    out[message] = {1, id, 1}
  end
end
return out
