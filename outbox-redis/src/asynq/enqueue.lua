-- Enqueues one task as Asynq's own enqueue does, refusing an id whose
-- task still exists.
-- KEYS[1]: the task's hash; KEYS[2]: the queue's pending list.
-- ARGV[1]: the encoded TaskMessage; ARGV[2]: the task id;
-- ARGV[3]: now, Unix nanoseconds.
-- Returns 1 when enqueued, or the stored msg when the id exists.
if redis.call('EXISTS', KEYS[1]) == 1 then
  local stored = redis.call('HGET', KEYS[1], 'msg')
  if stored then
    return stored
  end
  return ''
end
redis.call('HSET', KEYS[1], 'msg', ARGV[1], 'state', 'pending', 'pending_since', ARGV[3])
redis.call('LPUSH', KEYS[2], ARGV[2])
return 1
